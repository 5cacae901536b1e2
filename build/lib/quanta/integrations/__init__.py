"""Training loops Quanta does not own, run as Quanta trials: a callback per library.

- `quanta.integrations.lightning.QuantaCallback`: PyTorch Lightning (`lightning.pytorch.Trainer`).
- `quanta.integrations.transformers.QuantaTrainerCallback`: the Hugging Face `transformers.Trainer`.

Both are built on the same lower-level `Trial` interface (`app/sdk/trial.py`): `track()` the loop's
state (module, optimizers, schedulers, the loop's own counters), `enter_loop(step)` when training
starts, `advance_to(step)` to count optimizer steps, `boundary(step)` between them (where Quanta
parks, moves, checkpoints or stops the trial), `report()` after every evaluation, and `budget_spent`
to end the loop at the trial's step budget. Given no trial (or `Trial.standalone()`), each runs the
loop as if Quanta were not there.

The libraries are an optional extra: `pip install -e ".[integrations]"`. Importing this package
imports neither; each module imports its own library.
"""
