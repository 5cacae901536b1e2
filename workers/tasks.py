"""Thin tasks: they take ids (a round number and orders that name trials and devices, as `Order.to_dict()`
JSON), hand them to this process's `NodeAgent`, and are idempotent per (trial, round) there. Sent by
name from the controller's `CeleryRuntime`. A payload that is not a valid order fails the task with a
`WireError` naming the field, before anything is applied."""

from __future__ import annotations

from typing import Any

from quanta.executor.actions import Order
from quanta.executor.runtime.celery_conf import APPLY_TASK, CHECKPOINT_TASK, WARM_TASK
from quanta.executor.runtime.node import NodeAgent
from workers.celery_app import app

_agent: NodeAgent | None = None


def set_agent(agent: NodeAgent | None) -> None:
    global _agent
    _agent = agent


def agent() -> NodeAgent:
    if _agent is None:
        raise RuntimeError("no node agent in this worker process (start it with `quanta worker`)")
    return _agent


@app.task(name=APPLY_TASK, acks_late=True, reject_on_worker_lost=True)
def apply(round_no: int, actions: list[dict[str, Any]]) -> dict[str, Any]:
    return agent().apply(round_no, [Order.from_dict(d) for d in actions])


@app.task(name=WARM_TASK, acks_late=True)
def warm(modules: list[str]) -> None:
    agent().warm(modules)


@app.task(name=CHECKPOINT_TASK, acks_late=True)
def checkpoint(trial_id: int) -> None:
    agent().checkpoint(trial_id)
