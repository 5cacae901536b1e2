"""What a failed import of a trainable's module says: the missing package and the Quanta extra that
provides it, read from the installed distribution's metadata (pyproject.toml's optional dependencies)."""

from __future__ import annotations

import pytest

from quanta.import_check import ImportProblem, extra_for, import_failure


@pytest.mark.parametrize(
    ("package", "extra", "dist"),
    [
        ("lightning", "integrations", "lightning"),
        ("transformers", "integrations", "transformers"),
        ("pandas", "notebook", "pandas"),  # also in dev and peers: those are not for users
        ("mlflow", "mlflow", "mlflow-skinny"),  # the import name differs from the distribution's
        ("wandb", "wandb", "wandb"),
        ("yahpo_gym", "sim", "yahpo-gym"),
    ],
)
def test_the_extra_that_provides_a_package(package, extra, dist):
    assert extra_for(package) == (extra, dist)


def test_packages_no_extra_provides():
    assert extra_for("quanta_no_such_package_xyz") is None
    assert extra_for("optuna") is None  # only in the benchmarks' extra


def test_sentences():
    try:
        import lightning_is_not_here  # noqa: F401
    except ImportError as exc:
        report = import_failure(exc)
    assert report == {"error": "ModuleNotFoundError: No module named 'lightning_is_not_here'",
                      "missing": "lightning_is_not_here"}  # fmt: skip
    lightning = ImportProblem("examples.lightning_mnist1d", "ModuleNotFoundError: No module named 'lightning'",
                              "lightning").sentence()  # fmt: skip
    assert "the lightning package is not installed" in lightning
    assert "pip install 'quanta[integrations]' (or pip install lightning)" in lightning
    other = ImportProblem("m", "ModuleNotFoundError: No module named 'zzz'", "zzz").sentence()
    assert "pip install zzz" in other and "PYTHONPATH" in other
    broken = ImportProblem.of("m", import_failure(SyntaxError("invalid syntax"))).sentence()
    assert broken == "importing module 'm' failed with SyntaxError: invalid syntax; every trial would fail the same way"
