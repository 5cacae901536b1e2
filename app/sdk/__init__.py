"""What users import: `Trial` (inside a trainable) and `Client` (the REST client)."""

from app.sdk.trial import ControllerGone, Trial, TrialStopped

__all__ = ["ControllerGone", "Trial", "TrialStopped"]
