"""`device_maps`: a cluster's device order, each device's node and each node's devices, memoised on the
devices tuple. Its own module so that `kinds` and `board` (which imports `kinds`) can both use it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from quanta.executor.policy.types import DeviceView

__all__ = ["device_maps"]

_Static = tuple[dict[str, int], dict[str, str], dict[str, list[str]]]
_static_cache: list[tuple[tuple[DeviceView, ...], _Static]] = []


def device_maps(devices: tuple[DeviceView, ...]) -> _Static:
    """Device order, node of each device and devices of each node (in device order), memoised on the
    devices tuple itself (the controller hands every snapshot the same tuple while the cluster does not
    change). The maps are shared: callers must not change them."""
    for devs, maps in _static_cache:
        if devs is devices:
            return maps
    order = {d.id: i for i, d in enumerate(devices)}
    node_of = {d.id: d.node for d in devices}
    members: dict[str, list[str]] = {}
    for d in devices:
        members.setdefault(d.node, []).append(d.id)
    maps = (order, node_of, members)
    _static_cache[:] = [(devices, maps)]
    return maps
