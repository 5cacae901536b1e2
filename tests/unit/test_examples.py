"""The example searches: specs parse, trainables honour the trial contract, batches are deterministic,
the CIFAR-10 loader reads the python-batches format, and the fake CIFAR-10 carries a learnable signal.
Runs on one torch thread in well under 30 s."""

from __future__ import annotations

import importlib
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from examples import cifar10, cifar10_fake, digits, mnist1d
from quanta.devices import cpu_devices
from quanta.sdk import Trial
from quanta.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = [
    "examples/mnist1d.yaml",
    "examples/digits.yaml",
    "examples/cifar10.yaml",
    "examples/ci/cifar10-tiny.yaml",
]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data-root")


@pytest.fixture(scope="module")
def fake_dir(data_root) -> Path:
    return cifar10_fake.write_fake_cifar10(data_root / "cifar", n_train_per_batch=100, n_test=200)


@pytest.fixture(autouse=True)
def _cifar_data_root(monkeypatch, data_root):
    monkeypatch.setenv("QUANTA_DATA_ROOT", str(data_root))


# ---- specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SPECS)
def test_spec_parses_and_names_an_importable_trainable(path):
    spec = load_spec(ROOT / path)
    assert spec.metric.name == "accuracy" and spec.metric.goal == "maximize"
    assert spec.metric.target is not None and 0 < spec.metric.target < 1
    # mnist1d shows the defaults (multi-fidelity TPE, pause-don't-kill ASHA); the others name TPE and
    # time-slicing.
    expected = ("bohb", "asha") if path == "examples/mnist1d.yaml" else ("tpe", "timeslice")
    assert (spec.search.algorithm, spec.scheduler.policy) == expected
    module, func = spec.trainable.split(":")
    mod = importlib.import_module(module)
    assert callable(getattr(mod, func)) and callable(mod.prepare)


def test_ci_spec_points_at_the_fake_data_the_workflow_generates():
    spec = load_spec(ROOT / "examples/ci/cifar10-tiny.yaml")
    workflow = (ROOT / "examples/ci/quanta-search.yml").read_text()
    assert f"python -m examples.cifar10_fake {spec.config['data_dir']}" in workflow
    assert "quanta run examples/ci/cifar10-tiny.yaml --devices cpu:2 --output result.json" in workflow


# ---- trainables run standalone ----------------------------------------------------------------


def _run(mod, config: dict, steps: int) -> Trial:
    trial = Trial.standalone(config, max_steps=steps)
    mod.train(config, trial)
    return trial


@pytest.mark.parametrize(
    ("mod", "config"),
    [
        (mnist1d, {"channels": 8, "eval_every": 2}),
        (digits, {"hidden": 16, "eval_every": 2, "optimizer": {"name": "sgd", "momentum": 0.9}}),
    ],
    ids=["mnist1d", "digits"],
)
@pytest.mark.slow  # trains a model (mnist1d builds its data set first): seconds, kept out of `make test-unit`
def test_trainable_runs_and_reports_accuracy(mod, config):
    trial = _run(mod, config, 5)
    assert [step for step, _ in trial.history] == [0, 2, 4]  # every eval_every steps and the last
    for _, metrics in trial.history:
        assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["loss"] > 0


def test_cifar10_trainable_runs_on_fake_data(fake_dir):
    config = {"data_dir": str(fake_dir), "width": 8, "stem_stride": 2, "batch_size": 16, "eval_every": 2}
    trial = _run(cifar10, config, 3)
    assert [step for step, _ in trial.history] == [0, 2]
    assert all(0.0 <= m["accuracy"] <= 1.0 for _, m in trial.history)


def test_cifar10_refuses_a_data_dir_outside_the_data_root(tmp_path):
    outside = cifar10_fake.write_fake_cifar10(tmp_path / "elsewhere", n_train_per_batch=10, n_test=10)
    with pytest.raises(ValueError, match=r"config.data_dir .* outside the data root"):
        cifar10.load_cifar10(outside)
    link = Path(os.environ["QUANTA_DATA_ROOT"]) / "link-out"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="outside the data root"):  # a link does not get around it
        cifar10.load_cifar10(link)


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_cifar10_batches_that_would_run_code_are_refused(data_root, tmp_path, monkeypatch):
    """A batch file whose pickle calls a function (here os.system) is refused before anything runs."""
    evil = cifar10_fake.write_fake_cifar10(data_root / "evil", n_train_per_batch=10, n_test=10)
    with (evil / "test_batch").open("wb") as fh:
        pickle.dump({b"data": _Payload(), b"labels": [0]}, fh, protocol=2)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="refused global .*system"):
        cifar10.load_cifar10(evil)
    assert not (tmp_path / "pwned").exists()


def test_cifar10_trainable_requires_data_dir():
    with pytest.raises(ValueError, match="data_dir"):
        _run(cifar10, {}, 1)


@pytest.mark.slow  # 120 training steps of a small CNN: seconds, kept out of `make test-unit`
def test_fake_cifar10_is_learnable(fake_dir):
    config = {
        "data_dir": str(fake_dir),
        "width": 8,
        "stem_stride": 2,
        "batch_size": 32,
        "optimizer": "adam",
        "lr": 3e-3,
        "eval_every": 40,
    }
    trial = _run(cifar10, config, 120)  # measured: 0.70-0.79 at step 100 over seeds 0-3
    accs = [m["accuracy"] for _, m in trial.history]
    assert accs[0] < 0.3  # chance is 0.1
    assert max(accs) > 0.5, accs


# ---- determinism ------------------------------------------------------------------------------


def test_mnist1d_batch_depends_only_on_seed_and_step():
    config = {"seed": 3, "batch_size": 64}
    n = len(mnist1d.load_data()["y"])
    per_epoch = n // 64
    steps = [0, 1, per_epoch - 1, per_epoch, 5 * per_epoch + 7]
    first = {k: mnist1d.batch(config, k) for k in steps}
    for k in [*steps[::-1], 9, 4 * per_epoch]:  # other steps in between evict the permutation cache
        mnist1d.batch(config, k)
    for k in steps:
        x, y = mnist1d.batch(config, k)
        assert torch.equal(x, first[k][0]) and torch.equal(y, first[k][1])
        assert x.shape == (64, 1, 40) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert not torch.equal(first[0][0], first[1][0])
    # A different seed gives different batches; an epoch visits every example once.
    assert not torch.equal(mnist1d.batch({"seed": 4, "batch_size": 64}, 0)[0], first[0][0])
    seen = np.concatenate([mnist1d.batch_indices(3, k, 64, n) for k in range(per_epoch)])
    assert len(set(seen.tolist())) == per_epoch * 64


def test_mnist1d_restart_from_checkpoint_replays_the_same_run(tmp_path):
    config = {"channels": 8, "dropout": 0.3, "eval_every": 10, "seed": 1}
    straight = _run(mnist1d, config, 30)

    devices = cpu_devices(1)[:1]
    ckpt = str(tmp_path / "trial.pt")
    first = Trial(0, config, 12, devices, checkpoint_path=ckpt)
    mnist1d.train(config, first)
    first.checkpoint()
    torch.manual_seed(12345)  # the restarted process's own RNG state must not matter
    resumed = Trial(0, config, 30, devices, checkpoint_path=ckpt, resume=True)
    mnist1d.train(config, resumed)

    assert resumed.history[-1][0] == straight.history[-1][0] == 29
    assert resumed.history[-1][1] == straight.history[-1][1]


def test_mnist1d_loading_keeps_global_rng_state(monkeypatch):
    import mnist1d.data as m1d_data

    real_args = m1d_data.get_dataset_args

    def small_args(as_dict=False):  # the real make_dataset (which reseeds), on 200 samples
        args = real_args(as_dict=False)
        args.num_samples = 200
        return args

    monkeypatch.setattr(m1d_data, "get_dataset_args", small_args)
    random.seed(7)
    np.random.seed(7)
    py_state, np_state = random.getstate(), np.random.get_state()
    data = mnist1d.build_data()  # uncached: really runs make_dataset
    assert random.getstate() == py_state
    after = np.random.get_state()
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]
    assert data["x"].shape == (160, 40) and data["x_test"].shape == (40, 40)
    assert data["x"].dtype == np.float32 and data["y"].dtype == np.int64
    assert not data["x"].flags.writeable  # shared by forked trials: read-only


@pytest.mark.slow  # builds the mnist1d data set three times: seconds, kept out of `make test-unit`
def test_mnist1d_cache_file_holds_exactly_the_built_data(tmp_path, monkeypatch):
    monkeypatch.setenv(mnist1d.CACHE_ENV, str(tmp_path))
    built = mnist1d.build_data()
    first = mnist1d.load_data.__wrapped__()  # no file yet: builds and writes it
    (cache,) = tmp_path.glob("mnist1d-*.npz")

    def no_build():
        raise AssertionError("built again despite the cache file")

    with monkeypatch.context() as m:
        m.setattr(mnist1d, "build_data", no_build)
        second = mnist1d.load_data.__wrapped__()  # read from the file
    for data in (first, second):
        assert set(data) == set(built)
        for k in built:
            assert data[k].dtype == built[k].dtype and np.array_equal(data[k], built[k])
            assert not data[k].flags.writeable
    cache.write_bytes(b"not an npz")  # a damaged file is rebuilt, not trusted
    assert np.array_equal(mnist1d.load_data.__wrapped__()["x"], built["x"])


def test_mnist1d_data_shapes():
    data = mnist1d.load_data()
    assert data["x"].shape == (4000, 40) and data["x_test"].shape == (1000, 40)
    assert sorted(np.unique(data["y"]).tolist()) == list(range(10))


def test_prepare_loads_numpy_arrays_once():
    mnist1d.prepare()
    digits.prepare()
    assert mnist1d.load_data() is mnist1d.load_data()
    assert all(isinstance(v, np.ndarray) for v in digits.load_data().values())
    assert digits.load_data()["x"].shape == (1437, 64) and digits.load_data()["x_test"].shape == (360, 64)


# ---- CIFAR-10 format --------------------------------------------------------------------------


def test_fake_cifar10_files_have_the_python_batches_format(fake_dir):
    names = sorted(p.name for p in fake_dir.iterdir())
    assert names == sorted([*cifar10.TRAIN_FILES, cifar10.TEST_FILE, cifar10.META_FILE])
    with (fake_dir / "data_batch_1").open("rb") as fh:
        raw = pickle.load(fh, encoding="bytes")
    assert isinstance(raw[b"data"], np.ndarray) and raw[b"data"].dtype == np.uint8
    assert raw[b"data"].shape == (100, 3072)
    assert isinstance(raw[b"labels"], list) and all(type(v) is int for v in raw[b"labels"])
    with (fake_dir / "batches.meta").open("rb") as fh:
        meta = pickle.load(fh, encoding="bytes")
    assert meta[b"label_names"][0] == b"airplane" and meta[b"num_vis"] == 3072

    data = cifar10.load_cifar10(fake_dir)
    assert data["x"].shape == (500, 3, 32, 32) and data["x"].dtype == np.uint8
    assert data["y"].shape == (500,) and data["y"].dtype == np.int64
    assert data["x_test"].shape == (200, 3, 32, 32) and data["y_test"].shape == (200,)
    assert np.bincount(data["y"], minlength=10).tolist() == [50] * 10
    assert data["label_names"] == cifar10_fake.LABEL_NAMES
    # Row layout: red plane, green plane, blue plane, each 32x32 row-major.
    assert np.array_equal(data["x"][0, 1].ravel(), raw[b"data"][0, 1024:2048])
    assert data["y"][:100].tolist() == raw[b"labels"]


def test_cifar10_loader_accepts_the_parent_of_cifar_10_batches_py(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTA_DATA_ROOT", str(tmp_path))
    cifar10_fake.write_fake_cifar10(tmp_path / "cifar-10-batches-py", n_train_per_batch=10, n_test=10)
    assert cifar10.load_cifar10(tmp_path)["x"].shape == (50, 3, 32, 32)


def test_cifar10_loader_names_the_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTA_DATA_ROOT", str(tmp_path))
    cifar10_fake.write_fake_cifar10(tmp_path, n_train_per_batch=10, n_test=10)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3") as info:
        cifar10.load_cifar10(tmp_path)
    assert "data_batch_1" not in str(info.value).split("expected")[0]
    with pytest.raises(FileNotFoundError, match="test_batch"):
        cifar10.load_cifar10(tmp_path / "nowhere")


def test_fake_cifar10_main_writes_a_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QUANTA_DATA_ROOT", str(tmp_path))
    cifar10_fake.main([str(tmp_path / "d"), "--train-per-batch", "10", "--test", "20", "--seed", "1"])
    assert "50 training and 20 test images" in capsys.readouterr().out
    data = cifar10.load_cifar10(tmp_path / "d")
    assert data["x"].shape == (50, 3, 32, 32) and data["x_test"].shape == (20, 3, 32, 32)
    again = cifar10_fake.write_fake_cifar10(tmp_path / "e", 10, 20, seed=1)
    assert (again / "test_batch").read_bytes() == (tmp_path / "d" / "test_batch").read_bytes()
