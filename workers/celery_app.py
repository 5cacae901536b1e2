"""The workers' Celery app: one queue per node (`node.<name>`), late acknowledgement, prefetch 1, a task
whose worker died is rejected back to the queue, reconnect to the broker forever.

The app object is cheap and holds no connection until `configure()` gives it a broker and a worker
starts; the settings are the ones the controller's client uses (`celery_conf`)."""

from __future__ import annotations

from celery import Celery

from quanta.executor.runtime.celery_conf import celery_conf, queue_of

app = Celery("quanta", set_as_current=False, include=["workers.tasks"])


def configure(broker_url: str, node: str) -> Celery:
    app.conf.update(celery_conf(broker_url))
    app.conf.task_default_queue = queue_of(node)
    return app
