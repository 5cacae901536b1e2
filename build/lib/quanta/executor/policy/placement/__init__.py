"""Where a policy's chosen trials go, shared by every policy: `board` (free devices, the choice that
prefers resident devices, then one node, then any), `kinds` (device kinds: effective rates and the
kind-aware choice, Gavel), `kind_rebalance` and `kind_nodes` (moving placed trials between kinds while
their summed effective rate rises), `device_maps` (a cluster's device order and nodes, memoised)."""

from quanta.executor.policy.placement.board import Board, moves_nobody

__all__ = ["Board", "moves_nobody"]
