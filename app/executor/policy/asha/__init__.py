"""Asynchronous successive halving (ASHA) and Hyperband as brackets of it: see `policy` for the whole
policy; `held` keeps the held trials across rounds, `rung_check` decides which rungs are passed over."""

from app.executor.policy.asha.policy import AshaPolicy

__all__ = ["AshaPolicy"]
