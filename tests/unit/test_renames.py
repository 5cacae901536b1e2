"""Renames of trial-state files (`quanta.renames`): `replace` is `os.replace` whose replaced file is
freed off the caller's thread, and `rename_over` also handles two names of one file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from quanta.renames import rename_over, replace


def wait_for_frees() -> None:
    for thread in threading.enumerate():
        if thread.name == "quanta-free-replaced":
            thread.join(10)


def deleted_files_held(folder: Path) -> list[str]:
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(folder)) and target.endswith("(deleted)"):
            held.append(target)
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd")
def test_replace_renames_and_lets_the_replaced_file_go(tmp_path: Path):
    src, dst = tmp_path / "new", tmp_path / "old"
    src.write_bytes(b"new state")
    dst.write_bytes(b"old state" * 1000)
    replace(src, dst)
    assert dst.read_bytes() == b"new state" and not src.exists()
    wait_for_frees()
    assert deleted_files_held(tmp_path) == []  # the old file is not held open: freed


def test_replace_onto_nothing_is_a_rename(tmp_path: Path):
    src, dst = tmp_path / "new", tmp_path / "absent"
    src.write_bytes(b"x")
    replace(src, dst)
    assert dst.read_bytes() == b"x" and not src.exists()


def test_a_replace_that_fails_changes_nothing_and_holds_nothing(tmp_path: Path):
    src, dst = tmp_path / "new", tmp_path / "a-folder"
    src.write_bytes(b"x")
    (dst / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        replace(src, dst)
    assert src.read_bytes() == b"x" and dst.is_dir()
    wait_for_frees()


def test_rename_over_a_second_name_of_the_same_file_removes_that_name(tmp_path: Path):
    dst = tmp_path / "checkpoint"
    dst.write_bytes(b"state")
    src = tmp_path / "staged"
    os.link(dst, src)
    rename_over(src, dst)
    assert not src.exists() and dst.read_bytes() == b"state"
