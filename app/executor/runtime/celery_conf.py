"""What the controller's Celery client (`CeleryRuntime`) and the workers (`workers/`) must agree on: the
names of the tasks (sent BY NAME, so `app/` never imports `workers/`), a node's queue, and the Celery
settings both sides use. Changing any of them changes the wire between controller and nodes: both sides
take them from here."""

from __future__ import annotations

from typing import Any

APPLY_TASK = "quanta.apply"
WARM_TASK = "quanta.warm"
CHECKPOINT_TASK = "quanta.checkpoint"


def queue_of(node: str) -> str:
    return f"node.{node}"


def celery_conf(broker_url: str) -> dict[str, Any]:
    """Settings shared by the controller's client and the workers (Celery style: late acknowledgement,
    prefetch 1, reconnect forever, bounded publish retries)."""
    return {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        "broker_connection_timeout": 2.0,
        "broker_transport_options": {
            # An unacknowledged task (its worker died) is delivered again after this long.
            "visibility_timeout": 3600,
            "socket_timeout": 5,
            "socket_connect_timeout": 2,
            "retry_on_timeout": True,
        },
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "task_publish_retry": True,
        "task_publish_retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.3, "interval_max": 1},
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }
