"""Real trial processes on CPU devices: park/resume, migration, crashes, controller loss."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from quanta.devices import Device, parse_devices
from quanta.executor.actions import (
    Checkpointed,
    Exited,
    Migrate,
    Parked,
    Release,
    Reported,
    Resumed,
    Run,
    Started,
    Stop,
    Suspend,
)
from quanta.executor.runtime.local import LocalRuntime
from quanta.executor.runtime.template import SPARES, start_template
from tests.integration.helpers import collect_until_exit, launches

LINEAR = "tests.trainables:linear"


def losses(events, tid):
    """(step, loss) of the trial's reports (not those a later process sent again from its spool)."""
    return [
        (e.step, e.metrics["loss"]) for e in events if isinstance(e, Reported) and e.trial_id == tid and not e.replay
    ]


@pytest.fixture
def rt_factory(tmp_path):
    made = []

    def make(table, devices="cpu:2", **kw):
        rt = LocalRuntime(parse_devices(devices), launches(tmp_path, table, **kw), warm_modules=["tests.trainables"])
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def test_suspend_resume_and_migration_preserve_training_exactly(rt_factory):
    """A trial parked and resumed many times, moving between two CPU devices, computes exactly the
    loss sequence of the same trial run without interruption."""
    cfg = {"steps": 400, "report_every": 1, "sleep_s": 0.0005, "lr": 0.05}
    rt = rt_factory({1: (LINEAR, cfg), 2: (LINEAR, cfg)})
    rt.apply(1, [Run(1, ("cpu:0",))])
    reference = losses(collect_until_exit(rt, {1}), 1)
    assert [s for s, _ in reference] == list(range(400))

    rt.apply(2, [Run(2, ("cpu:0",))])
    events, round_no, device = [], 3, "cpu:0"
    parks = 0
    while True:
        time.sleep(0.01)
        rt.apply(round_no, [Suspend(2)])
        round_no += 1
        device = "cpu:1" if device == "cpu:0" else "cpu:0"
        rt.apply(round_no, [Migrate(2, (device,))])
        round_no += 1
        got = rt.poll(0)
        events += got
        parks += 1
        if any(isinstance(e, Exited) for e in got) or parks > 2000:
            break
    events += collect_until_exit(rt, {2}) if not any(isinstance(e, Exited) for e in events) else []
    interrupted = losses(events, 2)
    n_parked = sum(isinstance(e, Parked) for e in events)
    migrations = [e for e in events if isinstance(e, Resumed) and e.migrated]
    assert n_parked >= 5, "the trial should have been parked several times"
    assert len(migrations) >= 5
    assert interrupted == reference  # bit-for-bit: same steps, same losses


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores for two CPU devices of their own")
def test_a_running_trial_moves_between_cpu_devices_at_once_without_a_park(rt_factory):
    """A move between CPU devices does not wait for the trial's mini-batch to end: every thread of the
    process is re-pinned to the new device's cores at once, with no park, the Resumed event is out when
    `apply` returns (a park would wait for the rest of a 1 s mini-batch), announced once, and the trial
    computes on from where it was on the new cores."""
    devices = {d.id: d for d in parse_devices("cpu:2")}
    mask = {name: float(sum(1 << c for c in d.cores)) for name, d in devices.items()}
    rt = rt_factory({1: ("tests.trainables:cores", {"batch_s": 1.0, "steps": 3})})
    rt.apply(1, [Run(1, ("cpu:0",))])
    events: list = []
    while not any(isinstance(e, Reported) for e in events):  # one mini-batch done: in the next one now
        events += rt.poll(5)
    began = time.monotonic()
    rt.apply(2, [Migrate(1, ("cpu:1",))])
    took = time.monotonic() - began
    pid = rt.residency()[1].extra["pid"]
    pinned = {tid: os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}
    events += rt.poll(0)
    moved = [e for e in events if isinstance(e, Resumed)]
    assert moved and moved[0].migrated and moved[0].devices == ("cpu:1",)
    assert took < 0.5, f"the move took {took:.2f} s: it waited for the mini-batch"
    assert pinned and all(cores == set(devices["cpu:1"].cores) for cores in pinned.values()), pinned
    assert rt.residency()[1].devices == ("cpu:1",) and rt.residency()[1].running
    events += collect_until_exit(rt, {1})
    assert not any(isinstance(e, Parked) for e in events)
    assert sum(isinstance(e, Resumed) for e in events) == 1  # the trial's own reply is not announced again
    reports = [e.metrics["cores"] for e in events if isinstance(e, Reported)]
    # On cpu:0 until the move, on cpu:1 from the mini-batch it was moved in (the second, unless a very
    # busy machine delivered the first report late) to the end.
    assert len(reports) == 3 and reports[0] == mask["cpu:0"] and reports[-1] == mask["cpu:1"]
    assert reports == sorted(reports, key=lambda m: m == mask["cpu:1"])
    assert next(e for e in events if isinstance(e, Exited)).status == "completed"


def test_moves_without_a_park_preserve_training_exactly(rt_factory):
    """A trial moved back and forth between two CPU devices while it runs (no suspend: each move
    re-pins it at once and reaches the trial at its next boundary) computes exactly the loss sequence
    of the same trial run without moves."""
    cfg = {"steps": 300, "report_every": 1, "sleep_s": 0.001, "lr": 0.05}
    rt = rt_factory({1: (LINEAR, cfg), 2: (LINEAR, cfg)})
    rt.apply(1, [Run(1, ("cpu:0",))])
    reference = losses(collect_until_exit(rt, {1}), 1)
    rt.apply(2, [Run(2, ("cpu:0",))])
    events: list = []
    while not any(isinstance(e, Reported) for e in events):  # computing (a process still starting parks)
        events += rt.poll(5)
    device, round_no = "cpu:0", 3
    while not any(isinstance(e, Exited) for e in events) and round_no < 2000:
        time.sleep(0.01)
        device = "cpu:1" if device == "cpu:0" else "cpu:0"
        rt.apply(round_no, [Migrate(2, (device,))])
        round_no += 1
        events += rt.poll(0)
    if not any(isinstance(e, Exited) for e in events):
        events += collect_until_exit(rt, {2})
    assert sum(isinstance(e, Resumed) and e.migrated for e in events) >= 5
    assert not any(isinstance(e, Parked) for e in events)
    assert losses(events, 2) == reference  # bit-for-bit: same steps, same losses


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores for devices of 1 and 2 cores")
def test_thread_count_is_the_same_in_every_quantum(tmp_path):
    """Trials time-sliced (parked and resumed many times) and migrated between a 1-core and a 2-core
    CPU device compute with the same torch thread count in every quantum: the trainable's own
    `torch.set_num_threads(1)` wins; without one, the count the trial started with stays."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    devices = [Device("cpu:0", "cpu", 0, (cores[0],)), Device("cpu:1", "cpu", 1, tuple(cores))]
    cases = {  # trial: (set_threads, first device, expected thread count)
        1: (1, "cpu:1", 1),  # the trainable's choice, on a 2-core device
        2: (None, "cpu:0", 1),  # one thread per core of the device it starts on (1 core) ...
        3: (None, "cpu:1", 2),  # ... or 2 cores, kept on the 1-core device
    }
    table = {
        t: ("tests.trainables:threads", {"steps": 10**6, "sleep_s": 0.002, "set_threads": n})
        for t, (n, _, _) in cases.items()
    }
    rt = LocalRuntime(devices, launches(tmp_path, table), warm_modules=["tests.trainables"])
    try:
        on = {t: first for t, (_, first, _) in cases.items()}
        rt.apply(1, [Run(t, (d,)) for t, d in on.items()])
        events: list = []
        for round_no in range(2, 42, 4):
            time.sleep(0.05)  # one quantum
            rt.apply(round_no, [Suspend(t) for t in cases])
            if round_no % 8 == 2:  # every other resume moves the trials to the other device
                on = {t: "cpu:1" if d == "cpu:0" else "cpu:0" for t, d in on.items()}
            rt.apply(round_no + 1, [Run(t, (d,)) for t, d in on.items()])
            events += rt.poll(0)
        time.sleep(0.1)  # a last quantum after the last move
        rt.apply(99, [Stop(t) for t in cases])
        events += collect_until_exit(rt, set(cases))
    finally:
        rt.close()
    for t, (_, _, expected) in cases.items():
        reports = [e for e in events if isinstance(e, Reported) and e.trial_id == t]
        park_steps = [e.step for e in events if isinstance(e, Parked) and e.trial_id == t]
        assert sum(e.migrated for e in events if isinstance(e, Resumed) and e.trial_id == t) >= 4
        # It computed (and reported, at every step) in at least 8 quanta, the last one included.
        assert len(set(park_steps)) >= 8 and max(e.step for e in reports) >= max(park_steps)
        assert {e.metrics["threads"] for e in reports} == {expected}, f"trial {t}"


def test_park_happens_at_a_minibatch_boundary_quickly(rt_factory):
    rt = rt_factory({1: (LINEAR, {"steps": 100000, "report_every": 1000, "sleep_s": 0.002})})
    rt.apply(1, [Run(1, ("cpu:0",))])
    time.sleep(0.5)
    rt.apply(2, [Suspend(1)])
    res = rt.residency()[1]
    assert not res.running
    parked = [e for e in rt.poll(1) if isinstance(e, Parked)]
    assert parked and parked[0].park_ms < 1000
    steps_at_park = res.steps
    time.sleep(0.3)
    assert rt.residency()[1].steps == steps_at_park  # parked trials do not advance
    rt.apply(3, [Stop(1)])
    ended = [e for e in collect_until_exit(rt, {1}) if isinstance(e, Exited)]
    assert ended[0].status == "killed"


def test_failures_are_isolated_and_reported(rt_factory):
    ok = {"steps": 300, "report_every": 50}
    rt = rt_factory({1: ("tests.trainables:boom", {}), 2: ("tests.trainables:segfault", {}), 3: (LINEAR, ok)})
    rt.apply(1, [Run(1, ("cpu:0",)), Run(2, ("cpu:1",)), Run(3, ("cpu:0",))])
    exits = {e.trial_id: e for e in collect_until_exit(rt, {1, 2, 3}) if isinstance(e, Exited)}
    assert exits[1].status == "failed" and "ValueError: boom at step 3" in exits[1].error
    assert exits[2].status == "crashed" and "SIGSEGV" in exits[2].error
    assert exits[3].status == "completed" and exits[3].steps == 300


def test_start_from_template_is_fast(rt_factory):
    rt = rt_factory({i: (LINEAR, {"steps": 5}) for i in range(1, 4)})
    rt.apply(1, [Run(i, ("cpu:0",)) for i in range(1, 4)])
    starts = [e for e in collect_until_exit(rt, {1, 2, 3}) if isinstance(e, Started)]
    assert len(starts) == 3
    # Generous bound for a loaded CI machine; bench/timeslice.py measures the real figure.
    assert min(e.start_ms for e in starts) < 1000


def _children(pid: int) -> set[int]:
    """The live child processes of `pid` (Linux: /proc/PID/task/*/children)."""
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            out |= {int(c) for c in fh.read().split()}
    return out


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and has not ended (a zombie has ended: only its parent's reaping is left)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(what, timeout: float = 30.0):
    """Poll `what()` until it is true or `timeout` passes; its last value."""
    deadline = time.monotonic() + timeout
    while not (got := what()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def _spares_of(template: int, not_in: set[int] = frozenset()) -> set[int]:
    """The template's children once they are `SPARES` and none of `not_in`, else the empty set."""
    children = _children(template)
    return children if len(children) == SPARES and not children & not_in else set()


def test_trials_run_in_spares_forked_ahead_which_a_warm_replaces_and_none_outlives_the_template(rt_factory):
    """The template keeps `SPARES` children forked ahead of requests: a trial asked for after a quiet
    moment runs in one of them (its process existed before the request), a warm replaces them (they
    predate its imports), and closing the runtime leaves none behind."""
    rt = rt_factory({1: (LINEAR, {"steps": 5}), 2: ("tests.trainables_feedback:logreg", {"steps": 5, "lr": 0.1})})
    rt._template.wait_ready()
    template = rt._template.process.pid
    spares = _wait_for(lambda: _spares_of(template))
    assert len(spares) == SPARES
    rt.apply(1, [Run(1, ("cpu:0",))])
    exits = {e.trial_id: e for e in collect_until_exit(rt, {1}) if isinstance(e, Exited)}
    assert exits[1].status == "completed" and exits[1].steps == 5
    assert rt._handles[1].pid in spares
    refilled = _wait_for(lambda: _spares_of(template, not_in={rt._handles[1].pid}))
    assert len(refilled) == SPARES  # the one used is replaced once the template is idle

    rt.warm(["tests.trainables_feedback"])
    assert rt.import_problem("tests.trainables_feedback") is None
    renewed = _wait_for(lambda: _spares_of(template, not_in=refilled))
    assert len(renewed) == SPARES
    rt.apply(2, [Run(2, ("cpu:1",))])
    exits = {e.trial_id: e for e in collect_until_exit(rt, {2}) if isinstance(e, Exited)}
    assert exits[2].status == "completed" and rt._handles[2].pid in renewed

    rt.close()
    gone = _wait_for(lambda: not any(_alive(p) for p in spares | refilled | renewed))
    assert gone, "a spare outlived its template"


def test_a_template_started_early_is_adopted_by_the_runtime(tmp_path):
    """`quanta run` starts the template before it builds the runtime: the runtime accepts it, warms the
    modules the template was not started with, and forks trials from it."""
    template = start_template(["tests.trainables"])
    table = {1: (LINEAR, {"steps": 5}), 2: ("tests.trainables_feedback:logreg", {"steps": 5, "lr": 0.1})}
    rt = LocalRuntime(
        parse_devices("cpu:1"),
        launches(tmp_path, table),
        warm_modules=["tests.trainables", "tests.trainables_feedback"],
        template=template,
    )
    try:
        rt.apply(1, [Run(1, ("cpu:0",)), Run(2, ("cpu:0",))])
        exits = {e.trial_id: e for e in collect_until_exit(rt, {1, 2}) if isinstance(e, Exited)}
        assert exits[1].status == exits[2].status == "completed"
        assert rt._template.process is template.process
        assert rt._template.warm_errors == {"tests.trainables": None, "tests.trainables_feedback": None}
    finally:
        rt.close()
    assert template.process.poll() is not None and not os.path.exists(template.tmp)


def test_closing_a_runtime_does_not_wait_for_a_template_still_warming_up(tmp_path):
    rt = LocalRuntime(parse_devices("cpu:1"), launches(tmp_path, {}), warm_modules=["tests.trainables"])
    started = time.monotonic()
    rt.close()  # at once: the template is still importing torch
    assert time.monotonic() - started < 5
    assert rt._template.process.poll() is not None


def test_trials_exit_when_their_controller_dies(tmp_path: Path):
    """kill -9 the process hosting the runtime: the template and the trial processes notice the
    closed connection and exit by themselves, so nothing keeps burning a device."""
    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from pathlib import Path
            from quanta.executor.actions import Run, Started
            from quanta.devices import Device, parse_devices
            from quanta.executor.runtime.local import LocalRuntime
            from tests.integration.helpers import launches
            table = {{1: ("tests.trainables:linear", {{"steps": 10**7, "report_every": 10**6, "sleep_s": 0.001}})}}
            rt = LocalRuntime(parse_devices("cpu:1"), launches(Path({str(tmp_path)!r}), table))
            rt.apply(1, [Run(1, ("cpu:0",))])
            while True:
                for e in rt.poll(1):
                    if isinstance(e, Started):
                        print("PIDS", rt._template.process.pid, rt.residency()[1].extra["pid"], flush=True)
            """
        )
    )
    host = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 60
        while not line.startswith("PIDS") and time.monotonic() < deadline:
            line = host.stdout.readline()
        assert line.startswith("PIDS"), "host did not start its trial"
        _, template_pid, trial_pid = line.split()
        time.sleep(0.5)
        while True:  # the trial's pid is reported once it said hello
            if int(trial_pid) > 0:
                break
        os.kill(host.pid, signal.SIGKILL)
        host.wait(10)
        # They notice within a mini-batch on a quiet machine; the bound is generous because once, with
        # both cores loaded to 7 by other work, one of them took longer than 10 s.
        deadline = time.monotonic() + 30
        alive = [int(template_pid), int(trial_pid)]
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if _alive(p)]
            time.sleep(0.1)
        assert not alive, f"processes {alive} outlived their controller"
    finally:
        if host.poll() is None:
            host.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_run_with_a_step_limit_parks_itself_at_its_first_report_past_it(rt_factory):
    """`Run(until=...)`: the trial parks itself right after its first report at or past the limit (a
    successive-halving rung), without a Suspend; resumed without a limit it runs to the end, and its
    reports are exactly those of an uninterrupted run."""
    cfg = {"steps": 300, "report_every": 50}
    rt = rt_factory({1: (LINEAR, cfg), 2: (LINEAR, cfg)})
    rt.apply(1, [Run(1, ("cpu:0",))])
    reference = losses(collect_until_exit(rt, {1}), 1)
    rt.apply(2, [Run(2, ("cpu:1",), until=120)])
    events: list = []
    deadline = time.monotonic() + 60
    while not any(isinstance(e, Parked) for e in events) and time.monotonic() < deadline:
        events += rt.poll(0.2)
    (parked,) = [e for e in events if isinstance(e, Parked)]
    assert parked.at_limit and parked.park_ms == 0.0
    assert parked.step == 151  # reported at step 150 (the first report past 120), parked before step 151
    assert not rt.residency()[2].running
    rt.apply(3, [Run(2, ("cpu:0",), until=220)])  # resumed, moved, with the next limit (report at 250)
    while sum(isinstance(e, Parked) for e in events) < 2 and time.monotonic() < deadline:
        events += rt.poll(0.2)
    assert [e.step for e in events if isinstance(e, Parked)] == [151, 251]
    rt.apply(4, [Run(2, ("cpu:0",))])
    events += collect_until_exit(rt, {2})
    assert losses(events, 2) == reference
    assert [e.status for e in events if isinstance(e, Exited)] == ["completed"]


def test_release_checkpoints_ends_the_process_and_a_later_run_resumes_from_it(rt_factory, tmp_path):
    cfg = {"steps": 300, "report_every": 50}
    rt = rt_factory({1: (LINEAR, cfg), 2: (LINEAR, cfg)}, resume=True)  # restore when a checkpoint exists
    rt.apply(1, [Run(1, ("cpu:0",))])
    reference = losses(collect_until_exit(rt, {1}), 1)
    rt.apply(2, [Run(2, ("cpu:0",), until=100)])
    events: list = []
    deadline = time.monotonic() + 60
    while not any(isinstance(e, Parked) for e in events) and time.monotonic() < deadline:
        events += rt.poll(0.2)
    rt.apply(3, [Release(2)])
    events += collect_until_exit(rt, {2})
    exited = [e for e in events if isinstance(e, Exited)]
    assert [e.status for e in exited] == ["released"] and exited[0].steps == 101
    assert 2 not in rt.residency()
    assert any(isinstance(e, Checkpointed) for e in events)
    rt.apply(4, [Run(2, ("cpu:1",))])  # a new process, restored from the checkpoint
    later = collect_until_exit(rt, {2})
    assert losses(later, 2)[0][0] == 150  # continued from the checkpoint at step 101, not from 0
    assert losses(events + later, 2) == reference


def test_a_killed_trials_reports_are_sent_again_by_its_next_process(rt_factory, tmp_path):
    """Reports are spooled beside the checkpoint before they are sent: the next process of a trial killed
    with SIGKILL sends them again (marked as replays, with their original step and time), so a report
    that died in flight with a node is not lost; the controller drops those it has stored."""
    cfg = {"steps": 120, "report_every": 10, "crash_at": 65, "crash_marker": str(tmp_path / "crashed")}
    rt = rt_factory({1: (LINEAR, cfg)}, resume=True)
    rt.apply(1, [Run(1, ("cpu:0",))])
    first = collect_until_exit(rt, {1})
    assert [e.status for e in first if isinstance(e, Exited)] == ["crashed"]
    made = [(e.step, e.at) for e in first if isinstance(e, Reported)]
    assert made and not any(e.replay for e in first if isinstance(e, Reported))
    rt.apply(2, [Run(1, ("cpu:0",))])
    second = collect_until_exit(rt, {1})
    replayed = [(e.step, e.at) for e in second if isinstance(e, Reported) and e.replay]
    assert replayed == made  # every report of the killed process, first, as it was made
    fresh = [e.step for e in second if isinstance(e, Reported) and not e.replay]
    assert fresh[-1] == 119 and [e.status for e in second if isinstance(e, Exited)] == ["completed"]


def test_a_first_process_starts_its_log_and_spool_afresh(rt_factory, tmp_path):
    """Files already at a new trial's paths are another search's (two databases' searches in one working
    directory): its first process empties the log, replays no spooled report and keeps only its own."""
    (tmp_path / "trial-1.log").write_text("another search's output\n")
    (tmp_path / "ckpt-1.pt.reports.jsonl").write_text('{"step": 5, "metrics": {"accuracy": 0.99}, "at": 1.0}\n')
    rt = rt_factory({1: ("tests.trainables:chatty", {"steps": 3})})
    rt.apply(1, [Run(1, ("cpu:0",))])
    events = collect_until_exit(rt, {1})
    assert [e.status for e in events if isinstance(e, Exited)] == ["completed"]
    reported = [(e.step, e.replay) for e in events if isinstance(e, Reported)]
    assert reported == [(0, False), (1, False), (2, False)]
    log = (tmp_path / "trial-1.log").read_text()
    assert "another search" not in log and "chatty trial 1 stdout step 2" in log
    assert len((tmp_path / "ckpt-1.pt.reports.jsonl").read_text().splitlines()) == 3
