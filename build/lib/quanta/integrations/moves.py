"""What both integrations move with a trial beyond its module and optimizers (which `Trial` moves)."""

from __future__ import annotations

from typing import Any

import torch


def move_scaler(scaler: Any, device: torch.device) -> None:
    """Move a mixed-precision `torch.amp.GradScaler`'s scale and growth tracker (created on the device
    of the first loss it scaled) to `device`; `GradScaler` has no `to()`. None: nothing to move."""
    if scaler is None:
        return
    for name in ("_scale", "_growth_tracker"):
        value = getattr(scaler, name, None)
        if torch.is_tensor(value):
            setattr(scaler, name, value.to(device))
