"""One workdir per database (`quanta.workdir`): the folder names, the identity a workdir is claimed with."""

from __future__ import annotations

import os

import pytest

from quanta.workdir import MARKER, WorkdirTaken, claim_workdir, database_identity, database_key, workdir_for


def test_identity_resolves_sqlite_paths_and_leaves_passwords_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert database_identity("sqlite:///q.db") == f"sqlite:///{os.path.realpath(tmp_path / 'q.db')}"
    assert database_identity(f"sqlite:///{tmp_path}/q.db?timeout=5") == database_identity("sqlite:///q.db")
    pg = database_identity("postgresql://quanta:s3cret@db:5432/quanta")
    assert pg == "postgresql://quanta@db:5432/quanta" and "s3cret" not in pg
    assert database_identity("sqlite://") == "sqlite://:memory:"


def test_keys_name_the_database_and_differ_between_databases(tmp_path):
    a, b = database_key(f"sqlite:///{tmp_path}/a.db"), database_key(f"sqlite:///{tmp_path}/sub/a.db")
    assert a.startswith("a-") and b.startswith("a-") and a != b
    assert database_key("postgresql://u:p@host/exp") == database_key("postgresql://u:other@host/exp")
    assert database_key("postgresql://u:p@host/exp").startswith("exp-")
    assert database_key("sqlite://") != database_key("sqlite://")  # in-memory: new each time
    assert workdir_for("sqlite:///a.db", None).parent.name == ".quanta"
    assert workdir_for("sqlite:///a.db", tmp_path / "w") == tmp_path / "w"


def test_a_workdir_is_claimed_once(tmp_path):
    work = tmp_path / "w"
    claim_workdir(work, f"sqlite:///{tmp_path}/a.db")
    claim_workdir(work, f"sqlite:///{tmp_path}/a.db")  # its own: fine
    assert (work / MARKER).read_text().splitlines()[0] == f"sqlite:///{os.path.realpath(tmp_path / 'a.db')}"
    with pytest.raises(WorkdirTaken, match="another database"):
        claim_workdir(work, f"sqlite:///{tmp_path}/b.db")
    old = tmp_path / "old"  # made before workdirs were claimed: taken as it is
    (old / "search-1").mkdir(parents=True)
    claim_workdir(old, f"sqlite:///{tmp_path}/b.db")
    assert (old / MARKER).exists()
