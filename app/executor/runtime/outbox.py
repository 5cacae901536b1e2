"""`Outbox`: the controller's messages to nodes, kept in order until the broker has taken them.

Contract (used by `CeleryRuntime`, which gives the function that publishes one message):
- `send` queues a message and tries at once to publish everything queued, oldest first; `flush` tries
  again, at most once a second after a failure (`retry_at`) unless forced.
- A message that fails to publish stays at the head: later ones never overtake it, so a node applies
  rounds in the order they were planned once the broker is back. Failures are logged at most every 5 s.
- `on_sent` is called for each message the broker took, in order (the runtime starts the clock of what
  it expects from that node then, not when the message was queued).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quanta.executor.actions import Order

log = logging.getLogger("quanta.celery")


@dataclass
class Message:
    node: str
    task: str
    args: list[Any]
    links: list[tuple[str, Order]] = field(default_factory=list)  # (target node, order) started after this
    trials: tuple[int, ...] = ()


class Outbox:
    def __init__(self, publish: Callable[[Message], None], on_sent: Callable[[Message], None]):
        self._publish = publish
        self._on_sent = on_sent
        self._queue: deque[Message] = deque()
        self.retry_at = 0.0
        self._error_logged = 0.0

    def __len__(self) -> int:
        return len(self._queue)

    def send(self, msg: Message) -> None:
        self._queue.append(msg)
        self.flush(force=True)

    def flush(self, force: bool = False) -> None:
        if not self._queue or (not force and time.monotonic() < self.retry_at):
            return
        while self._queue:
            msg = self._queue[0]
            try:
                self._publish(msg)
            except Exception as exc:
                self.retry_at = time.monotonic() + 1.0
                if time.monotonic() - self._error_logged > 5:
                    log.warning("cannot reach the broker (%s): %d messages wait", exc, len(self._queue))
                    self._error_logged = time.monotonic()
                return
            self._queue.popleft()
            self._on_sent(msg)
