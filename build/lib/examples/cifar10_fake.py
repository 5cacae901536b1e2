"""Write a fake CIFAR-10 in the exact on-disk format of the python batches, for tests and CI.

    python -m examples.cifar10_fake DIR [--train-per-batch 200] [--test 500] [--seed 0]

writes `DIR/data_batch_1` ... `data_batch_5`, `DIR/test_batch` and `DIR/batches.meta`: protocol-2
pickles of dicts with bytes keys, `b"data"` a uint8 (N, 3072) array (the red, green and blue 32x32
planes of each image, row-major), `b"labels"` a list of ints, `b"filenames"`, `b"batch_label"`; the meta
file holds `b"label_names"`, `b"num_cases_per_batch"` and `b"num_vis"`. `examples.cifar10.load_cifar10`
reads it exactly like the real thing.

The images carry a learnable signal: each class has its own colour, painted as a soft blob of random
size at a random place over a noisy, randomly tinted background, with a smaller blob of another
class's colour as a distractor. A small CNN separates the classes in a few hundred steps, while a
poor learning rate still fails: enough for a search to reach an accuracy target in seconds.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np

LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
# One well-separated RGB colour per class.
PALETTE = np.array(
    [
        [230, 25, 75],
        [60, 180, 75],
        [255, 225, 25],
        [0, 130, 200],
        [245, 130, 48],
        [145, 30, 180],
        [70, 240, 240],
        [240, 50, 230],
        [128, 128, 0],
        [250, 250, 250],
    ],
    dtype=np.float32,
)


def make_images(labels: np.ndarray, rng: np.random.Generator, noise: float = 40.0) -> np.ndarray:
    """uint8 (N, 3072) images in CIFAR's layout for the given labels."""
    n = len(labels)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    tint = rng.uniform(60, 160, size=(n, 3, 1, 1)).astype(np.float32)
    img = tint + rng.normal(0, noise, size=(n, 3, 32, 32)).astype(np.float32)

    def paint(colours: np.ndarray, radius_lo: float, radius_hi: float) -> None:
        cy = rng.uniform(6, 26, size=(n, 1, 1))
        cx = rng.uniform(6, 26, size=(n, 1, 1))
        r = rng.uniform(radius_lo, radius_hi, size=(n, 1, 1))
        alpha = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r**2)).astype(np.float32)[:, None]
        img[:] = img * (1 - alpha) + colours[:, :, None, None] * alpha

    distractor = (labels + rng.integers(1, 10, size=n)) % 10
    paint(PALETTE[distractor], 1.5, 2.5)
    paint(PALETTE[labels], 3.0, 6.0)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8).reshape(n, 3072)


def _dump(obj: dict, path: Path) -> None:
    with path.open("wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def write_fake_cifar10(directory: str | Path, n_train_per_batch: int = 200, n_test: int = 500, seed: int = 0) -> Path:
    """Write the seven CIFAR-10 python files into `directory` (created if needed); return it.
    Labels are balanced (as in CIFAR-10) and shuffled; the same seed writes identical files."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def balanced(n: int) -> np.ndarray:
        return rng.permutation(np.arange(n) % 10).astype(np.int64)

    for b in range(1, 6):
        labels = balanced(n_train_per_batch)
        _dump(
            {
                b"batch_label": f"training batch {b} of 5 (fake)".encode(),
                b"labels": [int(v) for v in labels],
                b"data": make_images(labels, rng),
                b"filenames": [f"fake_train_{b}_{i:05d}.png".encode() for i in range(len(labels))],
            },
            root / f"data_batch_{b}",
        )
    labels = balanced(n_test)
    _dump(
        {
            b"batch_label": b"testing batch 1 of 1 (fake)",
            b"labels": [int(v) for v in labels],
            b"data": make_images(labels, rng),
            b"filenames": [f"fake_test_{i:05d}.png".encode() for i in range(len(labels))],
        },
        root / "test_batch",
    )
    _dump(
        {
            b"num_cases_per_batch": n_train_per_batch,
            b"label_names": [name.encode() for name in LABEL_NAMES],
            b"num_vis": 3072,
        },
        root / "batches.meta",
    )
    return root


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.cifar10_fake", description="Write a fake CIFAR-10 (python batches format)."
    )
    parser.add_argument("directory", help="where to write data_batch_1..5, test_batch and batches.meta")
    parser.add_argument("--train-per-batch", type=int, default=200, help="images per training batch (x5)")
    parser.add_argument("--test", type=int, default=500, help="test images")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = write_fake_cifar10(args.directory, args.train_per_batch, args.test, args.seed)
    print(f"wrote fake CIFAR-10 to {root}: {5 * args.train_per_batch} training and {args.test} test images")


if __name__ == "__main__":
    main()
