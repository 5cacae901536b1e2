"""The mechanism's default cadences, as plain numbers: the defaults of `MechanismKnobs`
(`quanta.executor.policy.knobs`) and of `TrialLaunch` (`quanta.executor.actions`), which a trial process
reads. Kept apart from the knob models so that a trial process, forked from the template on the path
of every cold start, never imports pydantic and the knob models (a sixth of a second of CPU there)."""

from __future__ import annotations

CHECKPOINT_EVERY_QUANTA = 10  # checkpoint a running trial every this many quanta
CHECKPOINT_EVERY_S = 60.0  # checkpoint a trial that never parks this often
