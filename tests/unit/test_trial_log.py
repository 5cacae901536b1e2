"""A trial's log stays bounded (`quanta.executor.runtime.trial_log`): cut to its tail from a line start,
with a mark; `tail` reads whole lines from the end."""

from __future__ import annotations

from quanta.executor.runtime import trial_log


def test_a_log_past_its_cap_is_cut_to_its_last_lines(tmp_path):
    path = tmp_path / "trial-1.log"
    lines = [f"line {i:05d}\n".encode() for i in range(2000)]  # 11 bytes each
    path.write_bytes(b"".join(lines))
    assert not trial_log.keep_bounded(path, cap=len(lines) * 11, keep=100)  # at the cap: left alone
    assert trial_log.keep_bounded(path, cap=1000, keep=100)
    data = path.read_bytes()
    assert data.startswith(trial_log.CUT_MARK)
    kept = data.removeprefix(trial_log.CUT_MARK)
    assert kept == b"".join(lines[-9:]) and len(data) < 200  # whole lines, the newest ones
    assert not trial_log.keep_bounded(tmp_path / "missing.log")


def test_tail_reads_whole_lines_from_the_end(tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(b"first line\nsecond line\nthird\n")
    assert trial_log.tail(path, 1000) == b"first line\nsecond line\nthird\n"
    assert trial_log.tail(path, 10) == b"third\n"
    assert trial_log.tail(tmp_path / "none.log", 10) is None


def test_the_watch_thread_cuts_a_growing_log(tmp_path, monkeypatch):
    import time

    path = tmp_path / "w.log"
    monkeypatch.setattr(trial_log, "LOG_CAP_BYTES", 500)
    monkeypatch.setattr(trial_log, "LOG_KEEP_BYTES", 100)
    trial_log.watch(path, every_s=0.05)
    with path.open("ab") as fh:
        for i in range(300):
            fh.write(f"output {i:04d}\n".encode())
            fh.flush()
            time.sleep(0.002)
    deadline = time.monotonic() + 5
    while path.stat().st_size > 500 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.stat().st_size <= 500 and path.read_bytes().startswith(trial_log.CUT_MARK)


def test_a_trials_log_is_created_private_and_an_older_one_made_private(tmp_path):
    """0600 like the database: a trial's output may print its configuration, paths and data."""
    import os
    import stat

    path = tmp_path / "search-1" / "logs" / "trial-1.log"
    old_umask = os.umask(0o022)  # the usual one: it would let 0644 through
    try:
        fd = trial_log.open_log(path, fresh=True)
        os.write(fd, b"hello\n")
        os.close(fd)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        older = tmp_path / "older.log"
        older.write_bytes(b"before\n")
        older.chmod(0o644)  # as an earlier version left it
        fd = trial_log.open_log(older, fresh=False)
        os.write(fd, b"after\n")
        os.close(fd)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(older.stat().st_mode) == 0o600 and older.read_bytes() == b"before\nafter\n"
