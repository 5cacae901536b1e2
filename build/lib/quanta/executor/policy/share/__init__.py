"""The share layer over the policies: device time divided between users by weight and among a user's
searches equally, each search's own policy planning inside its share (`policy`: the round; `allotment`:
who gets how many devices; `accounts`: the device-second accounts and rho)."""

from quanta.executor.policy.share.accounts import SHARE_STATE, allocation, shares_of
from quanta.executor.policy.share.allotment import (
    Group,
    bounded_shares,
    fair_shares,
    groups_of,
    water_fill,
    whole_devices,
)
from quanta.executor.policy.share.policy import GROUPS_STATE, SharePolicy, assign_devices, sub_snapshot

__all__ = [
    "GROUPS_STATE",
    "SHARE_STATE",
    "Group",
    "SharePolicy",
    "allocation",
    "assign_devices",
    "bounded_shares",
    "fair_shares",
    "groups_of",
    "shares_of",
    "sub_snapshot",
    "water_fill",
    "whole_devices",
]
