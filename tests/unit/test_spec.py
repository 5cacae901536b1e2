"""Spec validation: errors name the field path and the reason."""

from __future__ import annotations

import json

import pytest
import yaml

from quanta.spec import SpecError, load_spec, parse_spec

GOOD = """
name: mnist1d-cnn
trainable: examples.mnist1d:train
space:
  lr: {loguniform: [0.0001, 0.3]}
  channels: {choice: [8, 16, 32, 64]}
  optimizer: {choice: [{name: sgd, momentum: {uniform: [0.0, 0.99]}}, {name: adam}]}
metric: {name: accuracy, goal: maximize, target: 0.85}
budget: {max_trials: 100, max_steps: 3000, max_seconds: 1800}
parallelism: 8
search: {algorithm: tpe, n_startup: 20}
scheduler: {policy: timeslice, quantum_s: 2.0}
seed: 0
"""


def errors_of(text):
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    return dict(info.value.errors)


def test_good_spec_parses():
    spec = parse_spec(GOOD)
    assert spec.budget.max_steps == 3000 and spec.scheduler.policy == "timeslice"
    assert spec.metric.reaches(0.86) and not spec.metric.reaches(0.84)


@pytest.mark.parametrize(
    ("old", "new", "path", "reason"),
    [
        ("max_steps: 3000", "max_steps: 0", "budget.max_steps", "greater than or equal to 1"),
        ("goal: maximize", "goal: biggest", "metric.goal", "maximize"),
        ("policy: timeslice", "policy: lottery", "scheduler.policy", "fifo"),
        ("examples.mnist1d:train", "examples/mnist1d.py", "trainable", "package.module:function"),
        ("[0.0001, 0.3]", "[0.3, 0.0001]", "space.lr.loguniform", "low < high"),
        (
            "momentum: {uniform: [0.0, 0.99]}",
            "momentum: {unifrom: [0.0, 0.99]}",
            "space.optimizer.choice[0].momentum",
            "unknown kind",
        ),
        ("parallelism: 8", "parallelism: 8\nbogus: 1", "bogus", "Extra inputs"),
        ("seed: 0", "seed: -1", "seed", "greater than or equal to 0"),
    ],
)
def test_errors_name_field_and_reason(old, new, path, reason):
    errs = errors_of(GOOD.replace(old, new))
    assert path in errs, errs
    assert reason in errs[path]


def test_missing_required_fields_are_named():
    errs = errors_of("name: x\n")
    assert {"trainable", "space", "metric"} <= set(errs)


def test_not_yaml_and_not_mapping():
    assert "spec" in errors_of("a: [1, 2")
    assert "spec" in errors_of("- 1\n- 2\n")


def test_load_spec_json_and_missing_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(parse_spec(GOOD).model_dump(mode="json")))
    assert load_spec(path).name == "mnist1d-cnn"
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("max_steps: 3000", "max_steps: zero"))
    with pytest.raises(SpecError, match=r"bad.yaml.*budget.max_steps"):
        load_spec(bad)


def test_spec_text_is_decoded_one_way_with_the_format_named_in_errors():
    from quanta.spec import decode_spec_text

    assert decode_spec_text('{"a": 1}', "json") == {"a": 1}
    assert decode_spec_text("a: 1", "yaml") == decode_spec_text("a: 1") == {"a": 1}
    for fmt, text, reason in [
        ("json", "a: 1", "not valid JSON"),
        ("yaml", "a: [1", "not valid YAML"),
        ("auto", "a: [1", "not valid YAML or JSON"),
        ("json", "[1, 2]", "must be a mapping of fields"),
        ("json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ]:
        with pytest.raises(SpecError) as info:
            decode_spec_text(text, fmt)
        assert info.value.errors[0][0] == "spec" and reason in info.value.errors[0][1], (fmt, info.value.errors)


def test_a_stored_spec_is_validated_once_per_process(monkeypatch):
    import quanta.spec.reading as spec_module
    from quanta.spec import spec_from_stored

    stored = parse_spec(GOOD).model_dump(mode="json")
    calls = []
    real = spec_module.parse_spec
    monkeypatch.setattr(spec_module, "parse_spec", lambda data, **kw: calls.append(1) or real(data, **kw))
    monkeypatch.setattr(spec_module, "_STORED", {})
    first = spec_from_stored(stored)
    assert first == parse_spec(GOOD)
    assert spec_from_stored(json.loads(json.dumps(stored))) is first  # a node reads the row again: cached
    assert len(calls) == 1
    with pytest.raises(SpecError):
        spec_from_stored({**stored, "parallelism": 0})
    with pytest.raises(SpecError):  # a bad spec is not cached: it fails every time
        spec_from_stored({**stored, "parallelism": 0})
    assert len(calls) == 3


# ---- the scheduler block: one knob model per policy, chosen by `policy` ---------------------------

# A valid value other than the default for every knob of every policy (a new knob must be added here).
KNOB_VALUES = {
    "quantum_s": 3.5,
    "checkpoint_every_quanta": 4,
    "checkpoint_every_s": 30.0,
    "max_retries": 5,
    "min_steps_before_judgement": 7,
    "feedback_every_steps": 9,
    "kill_threshold": 0.2,
    "bounds": (0.0, 1.0),
    "infer_bounds": False,
    "rung_eta": 2.0,
    "top_m": 1,
    "promise_weight": 2.0,
    "swap_margin": 0.1,
    "packing": False,
    "experimental": {"sticky": True, "gang": True, "gang_patience": 2},
    "pack_margin": 0.2,
    "pack_patience": 3,
    "grow_shrink": True,
    "idle_grow_s": 5.0,
    "queue_limits": (10.0, 20.0, 30.0),
    "starvation_factor": 2.0,
    "lookahead": 2,
}


def with_scheduler(block) -> str:
    return GOOD.replace("scheduler: {policy: timeslice, quantum_s: 2.0}", f"scheduler: {json.dumps(block)}")


@pytest.mark.parametrize("policy", ["fifo", "timeslice", "gandiva", "tiresias"])
def test_every_knob_of_every_policy_is_settable(policy):
    from quanta.executor.policy import policy_for
    from quanta.executor.policy.knobs import KNOBS

    fields = set(KNOBS[policy].model_fields) - {"policy"}
    assert fields <= set(KNOB_VALUES), fields - set(KNOB_VALUES)
    block = {"policy": policy, **{k: KNOB_VALUES[k] for k in fields}}
    spec = parse_spec(with_scheduler(block))
    assert spec.scheduler.policy == policy
    for k in fields:
        default = KNOBS[policy].model_fields[k].default
        value = getattr(spec.scheduler, k)
        value = value.model_dump() if hasattr(value, "model_dump") else value
        assert value == KNOB_VALUES[k] != default, k
    assert policy_for(spec.scheduler).name == policy
    assert parse_spec(spec.model_dump(mode="json")) == spec  # a stored spec reads back the same


def test_scheduler_defaults_to_asha_and_search_to_bohb_with_default_knobs():
    spec = parse_spec(GOOD.replace("scheduler: {policy: timeslice, quantum_s: 2.0}\n", ""))
    assert spec.scheduler.policy == "asha" and spec.scheduler.quantum_s == 2.0 and spec.scheduler.mode == "pause"
    assert parse_spec(with_scheduler({"quantum_s": 1.0})).scheduler.policy == "asha"
    assert parse_spec(GOOD.replace("search: {algorithm: tpe, n_startup: 20}\n", "")).search.algorithm == "bohb"
    g = parse_spec(with_scheduler({"policy": "gandiva"})).scheduler
    assert (g.kill_threshold, g.promise_weight, g.top_m, g.packing) == (0.05, 4.0, None, True)


@pytest.mark.parametrize(
    ("block", "path", "reason"),
    [
        ({"policy": "gandiva", "kill_threshold": 1.5}, "scheduler.kill_threshold", "less than or equal to 1"),
        ({"policy": "gandiva", "pack_patience": 0}, "scheduler.pack_patience", "greater than or equal to 1"),
        ({"policy": "gandiva", "bounds": [0, 1, 2]}, "scheduler.bounds", "at most 2"),
        ({"policy": "gandiva", "kill_treshold": 0.1}, "scheduler.kill_treshold", "Extra inputs"),
        ({"policy": "fifo", "top_m": 2}, "scheduler.top_m", "Extra inputs"),  # not a fifo knob
        ({"policy": "tiresias", "queue_limits": [10, 5]}, "scheduler.queue_limits", "must increase"),
        ({"quantum_s": 0}, "scheduler.quantum_s", "greater than 0"),
        ({"policy": "lottery"}, "scheduler.policy", "'fifo', 'timeslice', 'gandiva', 'tiresias'"),
    ],
)
def test_bad_knob_names_its_field(block, path, reason):
    errs = errors_of(with_scheduler(block))
    assert path in errs, errs
    assert reason in errs[path], errs[path]


def test_specs_stored_with_the_flat_scheduler_block_still_parse():
    # What `spec.model_dump()` stored before the knobs were split by policy: every field, whatever the policy.
    flat = {
        "quantum_s": 0.5, "checkpoint_every_quanta": 10, "checkpoint_every_s": 60.0, "max_retries": 2,
        "feedback_every_steps": None, "min_steps_before_judgement": None, "kill_threshold": 0.05,
        "top_m": None, "packing": True, "pack_margin": 0.05, "grow_shrink": False, "idle_grow_s": 30.0,
    }  # fmt: skip
    ts = parse_spec(with_scheduler({"policy": "timeslice", **flat})).scheduler
    assert ts.policy == "timeslice" and ts.quantum_s == 0.5
    g = parse_spec(with_scheduler({"policy": "gandiva", **flat, "top_m": 2})).scheduler
    assert g.policy == "gandiva" and g.top_m == 2 and g.quantum_s == 0.5


@pytest.mark.parametrize("bad", ["examples.mnist1d:train\n", "examples.mnist1d:train ", "exämples.m:train", "a..b:f"])
def test_trainable_must_match_whole(bad):
    with pytest.raises(SpecError, match="trainable"):
        parse_spec({**yaml.safe_load(GOOD), "trainable": bad})


def test_asha_and_hyperband_are_schedulers_with_their_knobs():
    base = yaml.safe_load(GOOD)
    spec = parse_spec({**base, "scheduler": {"policy": "asha", "mode": "kill", "eta": 4, "min_steps": 50}})
    assert (spec.scheduler.policy, spec.scheduler.mode, spec.scheduler.eta) == ("asha", "kill", 4.0)
    hb = parse_spec({**base, "scheduler": {"policy": "hyperband"}}).scheduler
    assert hb.policy == "hyperband" and hb.brackets == 3 and hb.mode == "pause"
    with pytest.raises(SpecError, match=r"scheduler\.mode"):
        parse_spec({**base, "scheduler": {"policy": "asha", "mode": "maybe"}})
    with pytest.raises(SpecError, match=r"scheduler\.eta"):
        parse_spec({**base, "scheduler": {"policy": "asha", "eta": 1}})


def test_bohb_search_settings():
    base = yaml.safe_load(GOOD)
    spec = parse_spec({**base, "search": {"algorithm": "bohb", "n_startup": 5, "eta": 3, "min_points": 4}})
    assert spec.search.algorithm == "bohb" and spec.search.min_points == 4
    with pytest.raises(SpecError, match=r"search\.eta"):
        parse_spec({**base, "search": {"algorithm": "bohb", "eta": 0.5}})


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("budget", {"max_trials": 10**9}, "budget.max_trials"),
        ("parallelism", 10**6, "parallelism"),
        ("resources", {"devices_per_trial": 10**6}, "resources.devices_per_trial"),
        ("seed", 2**200, "seed"),
    ],
)
def test_budgets_have_upper_bounds(field, value, path):
    base = yaml.safe_load(GOOD)
    data = {**base, field: {**base.get(field, {}), **value} if isinstance(value, dict) else value}
    assert path in errors_of(json.dumps(data))


def test_yaml_anchors_and_aliases_are_refused_before_expanding():
    """A 'billion laughs' body: nine levels of nine aliases would expand to 9**6 nodes; it is refused
    at the first anchor, in microseconds."""
    levels = ["  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 6):
        levels.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    bomb = GOOD + "config:\n" + "\n".join(levels) + "\n"
    with pytest.raises(SpecError, match="anchors"):
        parse_spec(bomb)
    with pytest.raises(SpecError, match="aliases"):
        parse_spec("name: x\ntrainable: *t\n")


# ---- knobs removed or moved under `experimental` ----------------------------------------------------------

BASE = {"name": "s", "trainable": "m:f", "space": {"x": {"uniform": [0, 1]}}, "metric": {"name": "acc"}}


def _stored(spec, scheduler=None, search=None) -> dict:
    """`spec` as a database holds it (a dump of every field), with the fields an older dump also had."""
    data = spec.model_dump(mode="json")
    data["scheduler"].update(scheduler or {})
    data["search"].update(search or {})
    return data


@pytest.mark.parametrize("policy", ["asha", "hyperband"])
def test_a_spec_stored_with_the_removed_knobs_at_their_defaults_loads_unchanged(policy):
    spec = parse_spec({**BASE, "scheduler": {"policy": policy}})
    old = _stored(
        spec,
        scheduler={"rule": "rent", "judge": None, "go_p": 0.5, "rung_check_on": "report"},
        search={"rank": "level", "multivariate": False},
    )
    assert parse_spec(old) == spec
    # Where a removed knob had no effect, its value is dropped too: a threshold of the judge when there was
    # none, the records/report choice with rung_check off, the rule in kill mode (which always cut off).
    inert = _stored(spec, scheduler={"go_p": 0.3, "rung_check": None, "rung_check_on": "best"})
    assert parse_spec(inert).scheduler == spec.scheduler.model_copy(update={"rung_check": None})
    killing = parse_spec({**BASE, "scheduler": {"policy": policy, "mode": "kill", "rule": "stopping"}}).scheduler
    assert (killing.mode, killing.rule) == ("kill", "rent")


@pytest.mark.parametrize(
    ("scheduler", "search", "path"),
    [
        ({"rule": "stopping"}, {}, "scheduler.rule"),
        ({"policy": "hyperband", "rule": "hybrid"}, {}, "scheduler.rule"),
        ({"judge": {}}, {}, "scheduler.judge"),
        ({"judge": {"kill_threshold": 0.1}, "go_p": 0.3}, {}, "scheduler.judge"),
        ({"rung_check_on": "best"}, {}, "scheduler.rung_check_on"),
        ({}, {"rank": "depth"}, "search.rank"),
        ({}, {"multivariate": True}, "search.multivariate"),
    ],
)
def test_a_removed_knob_set_otherwise_is_refused_naming_it(scheduler, search, path):
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "scheduler": scheduler, "search": search})
    ((where, reason),) = err.value.errors
    assert where == path and "removed" in reason, err.value.errors


def test_gandivas_research_knobs_sit_under_experimental_and_warn(caplog):
    plain = parse_spec({**BASE, "scheduler": {"policy": "gandiva"}})
    assert plain.scheduler.experimental is None and not plain.scheduler.research.sticky
    assert "experimental" not in caplog.text
    spec = parse_spec({**BASE, "scheduler": {"policy": "gandiva", "experimental": {"sticky": True, "gang": True}}})
    x = spec.scheduler.research
    assert (x.sticky, x.gang, x.gang_patience) == (True, True, 1)
    assert "scheduler.experimental (sticky=True, gang=True)" in caplog.text
    assert parse_spec(spec.model_dump(mode="json")) == spec  # a stored spec reads back the same
    # Specs stored while they sat beside the other knobs: moved under `experimental`, or dropped at their
    # defaults (so the default gandiva stays without the block, and without a warning).
    caplog.clear()
    old = _stored(plain, scheduler={"sticky": False, "gang": False, "gang_patience": 1})
    del old["scheduler"]["experimental"]
    assert parse_spec(old) == plain and "experimental" not in caplog.text
    moved = parse_spec(_stored(plain, scheduler={"sticky": True, "gang_patience": 3})).scheduler
    assert moved.experimental is not None and (moved.research.sticky, moved.research.gang_patience) == (True, 3)
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "scheduler": {"policy": "gandiva", "experimental": {"stiky": True}}})
    assert err.value.errors[0][0] == "scheduler.experimental.stiky"


# ---- the rungs, set once ------------------------------------------------------------------------------------


def test_under_a_policy_with_rungs_the_searcher_fits_at_the_schedulers_rungs():
    base = {**BASE, "budget": {"max_steps": 2000}}
    spec = parse_spec(base)  # the default: asha, bohb
    assert spec.searcher_rungs() == (25, 75, 225, 675, 2000) and spec.search.eta is None
    for policy in ("asha", "hyperband"):
        spec = parse_spec({**base, "scheduler": {"policy": policy, "eta": 4, "min_steps": 5}})
        assert spec.searcher_rungs() == (5, 20, 80, 320, 2000)
        # The same value in both blocks is not a second setting; a different one is refused, naming it.
        once = {**base, "scheduler": {"policy": policy, "eta": 4}}
        assert parse_spec({**once, "search": {"eta": 4}}).searcher_rungs() == parse_spec(once).searcher_rungs()
        for knob, theirs, ours in (("eta", 4, 3), ("min_steps", 5, 6)):
            with pytest.raises(SpecError) as err:
                parse_spec({**base, "scheduler": {"policy": policy, knob: theirs}, "search": {knob: ours}})
            ((path, reason),) = err.value.errors
            assert path == f"search.{knob}" and f"scheduler.{knob}" in reason
    # A policy without rungs: the search block's own, else the defaults.
    gandiva = {**base, "scheduler": {"policy": "gandiva"}}
    assert parse_spec({**gandiva, "search": {"eta": 4, "min_steps": 5}}).searcher_rungs() == (5, 20, 80, 320, 2000)
    assert parse_spec(gandiva).searcher_rungs() == (25, 75, 225, 675, 2000)


def test_a_search_stored_with_its_own_rungs_keeps_them():
    from quanta.spec import spec_from_stored

    spec = parse_spec({**BASE, "budget": {"max_steps": 2000}, "scheduler": {"eta": 4}})
    old = _stored(spec, search={"eta": 3.0})  # dumped before the rule: the search block's default then
    with pytest.raises(SpecError, match="search.eta"):
        parse_spec(old)  # as a new spec it is refused
    assert spec_from_stored(old).searcher_rungs() == (25, 75, 225, 675, 2000)  # stored: as it ran


# ---- depth and width: bounds a spec file and a posted spec meet alike ----------------------------------


def test_a_spec_nested_deeper_than_the_bound_is_refused_naming_the_path(tmp_path):
    from quanta.spec import MAX_DEPTH, nesting_problem

    base = yaml.safe_load(GOOD)
    deep: object = 1
    for _ in range(MAX_DEPTH - 1):  # the spec is level 1, config level 2: lists to level MAX_DEPTH are fine
        deep = [deep]
    assert parse_spec({**base, "config": {"x": deep[0]}}).config  # type: ignore[index]
    with pytest.raises(SpecError) as info:
        parse_spec({**base, "config": {"x": [deep]}})
    [(path, reason)] = info.value.errors
    assert path == "config.x" + "[0]" * (MAX_DEPTH - 2) and reason == f"nested more than {MAX_DEPTH} levels deep"
    file = tmp_path / "deep.json"  # `quanta run spec.json` meets the same bound
    file.write_text(json.dumps({**base, "space": {"lr": {"choice": [{"a": [deep]}]}}}))
    with pytest.raises(SpecError) as info:
        load_spec(file)
    assert info.value.errors[0][0].startswith("space.lr.choice[0].a")
    very: object = 1
    for _ in range(100_000):  # walked without recursion
        very = [very]
    assert nesting_problem({"config": very}) == "config" + "[0]" * (MAX_DEPTH - 1)


def test_a_space_with_too_many_parameters_or_options_or_a_dotted_name_is_refused():
    from quanta.spec import MAX_OPTIONS, MAX_PARAMETERS

    base = yaml.safe_load(GOOD)
    nested = {"opt": {"choice": [{f"k{i}": {"uniform": [0, 1]} for i in range(MAX_PARAMETERS)}]}}
    assert errors_of({**base, "space": nested}) == {
        "space": f"{MAX_PARAMETERS + 1} parameters; a search space has at most {MAX_PARAMETERS}"
    }  # the choice and the parameters of its nested space
    many = {f"c{i}": {"choice": list(range(MAX_OPTIONS // 4 + 1))} for i in range(4)}
    assert "choice options in all" in errors_of({**base, "space": many})["space"]
    assert list(errors_of({**base, "space": {"opt": {"choice": [{"a.b": 1}]}}})) == ["space.opt.choice[0].a.b"]
    wide = {f"p{i}": {"uniform": [0, 1]} for i in range(MAX_PARAMETERS + 1)}
    assert len(parse_spec({**base, "space": wide}, stored=True).space) == MAX_PARAMETERS + 1  # kept as stored


def test_mutable_flags_move_beside_the_space_and_only_numeric_parameters_take_them():
    flagged = GOOD.replace("lr: {loguniform: [0.0001, 0.3]}", "lr: {loguniform: [0.0001, 0.3], mutable: true}")
    spec = parse_spec(flagged)
    assert spec.mutable == ("lr",) and spec.space["lr"] == {"loguniform": [0.0001, 0.3]}
    stored = spec.model_dump(mode="json")
    assert stored["mutable"] == ["lr"] and parse_spec(stored, stored=True) == spec  # a stored spec: the same
    nested = parse_spec({**yaml.safe_load(GOOD), "space": {"opt": {"wd": {"uniform": [0, 1], "mutable": True}}}})
    assert nested.mutable == ("opt.wd",)
    assert parse_spec({**yaml.safe_load(GOOD), "mutable": ["lr"]}).mutable == ("lr",)  # the list itself
    assert parse_spec(GOOD.replace("}\n  channels", ", mutable: false}\n  channels")).mutable == ()

    def first_error(space=None, **fields):
        data = {**yaml.safe_load(GOOD), **fields, **({"space": space} if space is not None else {})}
        with pytest.raises(SpecError) as info:
            parse_spec(data)
        return info.value.errors[0]

    path, why = first_error({"channels": {"choice": [8, 16], "mutable": True}})
    assert path == "space.channels" and "needs a numeric parameter" in why and "not a choice" in why
    path, why = first_error({"opt": {"choice": [{"m": {"uniform": [0, 1], "mutable": True}}]}})
    assert path == "space.opt.choice[0].m" and "inside a choice" in why
    assert first_error({"lr": {"uniform": [0, 1], "mutable": "yes"}})[0] == "space.lr.mutable"
    path, why = first_error({"lr": 0.1}, mutable=["lr"])
    assert path == "space.lr" and "not a constant" in why
    assert first_error(mutable=["dropout"]) == ("mutable[0]", "'dropout' is not a parameter of the space")
