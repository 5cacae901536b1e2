"""The API on a posted spec's trainable: one it cannot find, may not import, or that names a file points
to the recipe for serving one's own trainables (docs/deploy.md), and one whose module fails to import (a
package it needs is missing) is refused before the search is stored, naming the package and the extra
that provides it. Through the real app (FastAPI's TestClient), as tests/integration/test_api.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from tests.integration.test_api import AUTH, SPEC, settings_for

ROOT = Path(__file__).resolve().parents[2]
RECIPE = 'docs/deploy.md, "Serving your own trainables"'


def _client(tmp_path: Path, **settings) -> TestClient:
    return TestClient(create_app(settings_for(tmp_path, **settings)), headers=AUTH)


def _detail(r) -> str:
    body = r.json()["detail"]
    return body if isinstance(body, str) else "; ".join(f"{e['loc']}: {e['msg']}" for e in body)


def test_the_recipe_the_errors_point_to_is_there():
    page = (ROOT / "docs" / "deploy.md").read_text()
    section = page.split("## Serving your own trainables", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"PYTHONPATH=\S+ QUANTA_TRAINABLE_ALLOWLIST=\S+ quanta serve", section)
    assert "quanta submit" in section
    assert "docs/deploy.md#serving-your-own-trainables" in (ROOT / "README.md").read_text()  # linked


def test_a_trainable_not_allowed_not_found_or_named_by_file_says_how_to_serve_it(tmp_path):
    with _client(tmp_path) as c:
        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "wine_mlp:train"})
        assert r.status_code == 403
        detail = _detail(r)
        assert "QUANTA_TRAINABLE_ALLOWLIST" in detail and "PYTHONPATH" in detail and RECIPE in detail

        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "tests.wine_mlp:train"})  # allowed, absent
        assert r.status_code == 422
        detail = _detail(r)
        assert "module 'tests.wine_mlp' cannot be found on the server's import path" in detail
        assert "QUANTA_TRAINABLE_ALLOWLIST" in detail and "PYTHONPATH" in detail and RECIPE in detail

        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "src/train.py:train"})
        assert r.status_code == 422
        detail = _detail(r)
        assert "names a file" in detail and "PYTHONPATH" in detail and RECIPE in detail
        assert c.get("/api/v1/searches").json()["total"] == 0


def test_a_trainable_whose_package_is_missing_is_422_naming_it(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "needs_missing.py").write_text(
        "import quanta_no_such_package_xyz\n\n\ndef train(config, trial):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(folder))  # the server's PYTHONPATH
    with _client(tmp_path, trainable_allowlist="needs_missing") as c:
        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "needs_missing:train"})
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert error["loc"] == "trainable"
        assert "No module named 'quanta_no_such_package_xyz'" in error["msg"]
        assert "the quanta_no_such_package_xyz package is not installed" in error["msg"]
        assert c.get("/api/v1/searches").json()["total"] == 0

        # Installed meanwhile: accepted (a failure is not remembered).
        (folder / "quanta_no_such_package_xyz.py").write_text("")
        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "needs_missing:train"})
        assert r.status_code == 201, r.text


@pytest.fixture
def without_lightning(tmp_path: Path) -> Path:
    """A folder that, first on the path, makes `import lightning` fail as it does where Lightning is not
    installed (the same exception: ModuleNotFoundError naming 'lightning')."""
    blocker = tmp_path / "no-lightning"
    (blocker / "lightning").mkdir(parents=True)
    (blocker / "lightning" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'lightning'\", name='lightning')\n"
    )
    return blocker


def test_the_lightning_example_without_lightning_is_422_naming_the_extra(tmp_path, monkeypatch, without_lightning):
    monkeypatch.syspath_prepend(str(without_lightning))
    with _client(tmp_path) as c:
        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "examples.lightning_mnist1d:train"})
        assert r.status_code == 422, r.text
        msg = r.json()["detail"][0]["msg"]
        assert "No module named 'lightning'" in msg
        assert "pip install 'quanta[integrations]'" in msg, msg
        assert c.get("/api/v1/searches").json()["total"] == 0


def test_the_check_can_be_turned_off(tmp_path, monkeypatch, without_lightning):
    monkeypatch.syspath_prepend(str(without_lightning))
    with _client(tmp_path, import_check_s=0) as c:
        r = c.post("/api/v1/searches", json={**SPEC, "trainable": "examples.lightning_mnist1d:train"})
        assert r.status_code == 201, r.text
