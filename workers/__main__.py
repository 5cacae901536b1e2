"""`python -m workers` (what `quanta worker` runs): a node agent hosting this machine's trials, and the
Celery worker that feeds it the controller's actions from the queue `node.<name>`."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="quanta worker", description=__doc__)
    p.add_argument("--node", required=True, help="this node's name (unique in the cluster)")
    p.add_argument("--devices", default="auto", help="cpu:N, cuda:0,1, cuda:all or auto")
    # The URLs carry passwords: `quanta worker` passes them in the environment, not on the command line.
    broker, db = os.environ.get("QUANTA_BROKER"), os.environ.get("QUANTA_DB_URL")
    p.add_argument("--broker", default=broker, required=broker is None, help="redis://:password@host:6379/0")
    p.add_argument("--db", default=db, required=db is None, help="postgresql://user:password@host:5432/quanta")
    p.add_argument("--checkpoints", required=True, help="the checkpoint store every node can read")
    p.add_argument("--heartbeat", type=float, default=1.0, help="seconds between heartbeats")
    p.add_argument("--lease", type=float, default=5.0, help="stop local trials after this long without a heartbeat")
    p.add_argument("--warm", default="", help="trainable modules to import before the first trial (comma-separated)")
    p.add_argument("--verbose", "-v", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format=f"%(asctime)s %(levelname)s [{args.node}] %(name)s: %(message)s",
    )
    # Trainables come from installed packages and PYTHONPATH, never from the directory the worker started in.
    from quanta.syspath import drop_working_dir

    drop_working_dir()

    from quanta.allowlist import ENV, Allowlist
    from quanta.db.cluster import DbCluster
    from quanta.devices import parse_devices
    from quanta.executor.runtime.celery_conf import queue_of
    from quanta.executor.runtime.node import NodeAgent
    from workers import tasks
    from workers.celery_app import configure

    devices = parse_devices(args.devices)
    allowlist = Allowlist.from_env()
    os.makedirs(args.checkpoints, exist_ok=True)
    ledger = DbCluster(args.db, workdir=args.checkpoints)
    agent = NodeAgent(
        args.node,
        devices,
        ledger,
        heartbeat_s=args.heartbeat,
        lease_s=args.lease,
        warm_modules=[m for m in args.warm.split(",") if m],
        # The node checks every trainable again: the broker and the database are not trusted to hold
        # only what the API let in.
        allowlist=allowlist,
    )
    tasks.set_agent(agent)
    celery = configure(args.broker, args.node)
    worker = celery.Worker(
        hostname=f"{args.node}@{socket.gethostname()}",
        queues=[queue_of(args.node)],
        pool="solo",  # tasks run in this process, where the agent is, one at a time in queue order
        concurrency=1,
        loglevel="INFO" if args.verbose else "WARNING",
        without_mingle=True,
        without_gossip=True,
        without_heartbeat=True,
        quiet=True,
    )
    print(
        f"quanta worker {args.node}: devices {', '.join(d.id for d in agent.devices())}; "
        f"queue {queue_of(args.node)}; checkpoints {args.checkpoints}; allowed trainables {allowlist} ({ENV})",
        flush=True,
    )
    try:
        worker.start()
    finally:
        tasks.set_agent(None)
        agent.close()
    return int(worker.exitcode or 0)


if __name__ == "__main__":
    sys.exit(main())
