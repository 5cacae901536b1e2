"""A tiny transformer trained by the Hugging Face `Trainer`, run as a Quanta trial by one callback
(`quanta.integrations.transformers.QuantaTrainerCallback`).

    quanta run examples/hf_tiny.yaml --devices cpu:2
    python -m examples.hf_tiny                    # one standalone run

Nothing is downloaded: the model is a `BertForSequenceClassification` built from a `BertConfig`
(2 layers, hidden size 32 by default: about 30k parameters) and the data set is generated here. The
task: sequences of 16 tokens over a vocabulary of 32; label 1 when token 1 occurs more often in the
first half than in the second (0-4 times each, never equally often). Counting alone does not solve it
(the counts of tokens ignore where they are), so the model must attend by position. From 200 training
sequences it generalises only partly: of 40 random configurations run to 1,000 steps the best reached
100 % held-out accuracy, the 6th 98.8 %, the 20th 94.1 % (`bench/results/targets_hf_tiny.json`), so
the learning rate, width and warm-up matter and a sweep's best configurations do not tie. (From 4,000
sequences of a plain count of two tokens, the best eight all reached 100 %.) The Trainer evaluates
every `eval_every` steps; the search's metric is `eval_accuracy` (the Trainer prefixes evaluation
metrics with `eval_`).
Needs the `integrations` extra: `pip install -e ".[integrations]"`.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, EvalPrediction, Trainer, TrainingArguments

from quanta import Trial
from quanta.integrations.transformers import QuantaTrainerCallback

DEFAULTS: dict[str, Any] = {
    "lr": 1e-3,
    "hidden": 32,
    "layers": 2,
    "heads": 2,
    "dropout": 0.1,
    "weight_decay": 0.0,
    "warmup_steps": 0,
    "batch_size": 32,
    "train_size": 200,
    "eval_every": 50,
    "seed": 0,
}
LENGTH, VOCAB = 16, 32
OUTPUT_ENV = "QUANTA_HF_OUTPUT"  # the Trainer's output_dir parent; default .quanta/hf_tiny


class CountingTask(torch.utils.data.Dataset):
    """`n` sequences: random tokens 3..VOCAB-1 with token 1 placed `a` times at random positions of the
    first half and `b` times in the second (a != b, each 0-4); label `a > b`. A function of (n, seed)
    only."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        x = rng.integers(3, VOCAB, size=(n, LENGTH))
        a = rng.integers(0, 5, size=n)
        b = (a + rng.integers(1, 5, size=n)) % 5  # never equal to a
        half = LENGTH // 2
        for i in range(n):
            x[i, rng.permutation(half)[: a[i]]] = 1
            x[i, half + rng.permutation(half)[: b[i]]] = 1
        self.x = torch.from_numpy(x).long()
        self.y = torch.from_numpy((a > b).astype(np.int64))

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long), "labels": self.y[i]}


@functools.cache
def datasets(train_size: int = 200) -> tuple[CountingTask, CountingTask]:
    """Train (`train_size` sequences) and evaluation (1,000) sets, the same in every trial."""
    return CountingTask(train_size, seed=1), CountingTask(1000, seed=2)


def prepare(config: dict[str, Any] | None = None) -> None:
    """Build the data once in Quanta's template process, so forked trials share it."""
    datasets(int({**DEFAULTS, **(config or {})}["train_size"]))


def build_model(cfg: dict[str, Any]) -> BertForSequenceClassification:
    torch.manual_seed(int(cfg["seed"]))
    hidden = int(cfg["hidden"])
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=int(cfg["layers"]),
        num_attention_heads=int(cfg["heads"]),
        intermediate_size=2 * hidden,
        max_position_embeddings=LENGTH,
        hidden_dropout_prob=float(cfg["dropout"]),
        attention_probs_dropout_prob=float(cfg["dropout"]),
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def accuracy(pred: EvalPrediction) -> dict[str, float]:
    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    return {"accuracy": float((np.argmax(logits, axis=-1) == pred.label_ids).mean())}


def train(config: dict[str, Any], trial: Trial) -> None:
    cfg = {**DEFAULTS, **config}
    model = build_model(cfg)
    train_set, eval_set = datasets(int(cfg["train_size"]))
    steps = min(trial.max_steps, int(cfg.get("max_steps", trial.max_steps)))
    every = max(1, int(cfg["eval_every"]))
    out = Path(os.environ.get(OUTPUT_ENV) or ".quanta/hf_tiny") / f"trial-{trial.id}"
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=int(cfg["batch_size"]),
        per_device_eval_batch_size=500,
        learning_rate=float(cfg["lr"]),
        weight_decay=float(cfg["weight_decay"]),
        warmup_steps=int(cfg["warmup_steps"]),
        eval_strategy="steps",
        eval_steps=every,
        logging_steps=every,
        save_strategy="no",  # Quanta checkpoints the trial
        report_to="none",
        use_cpu=True,
        seed=int(cfg["seed"]),
        dataloader_num_workers=0,
        disable_tqdm=trial.controlled,  # a trial's output is a log file: no bar there
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        compute_metrics=accuracy,
        callbacks=[QuantaTrainerCallback(trial)],
    )
    trainer.train()


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    t = Trial.standalone({"max_steps": steps}, metric="eval_accuracy")
    train(t.config, t)
    print("reports:", [(step, round(m["eval_accuracy"], 3)) for step, m in t.history])
