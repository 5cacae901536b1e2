"""Spec validation: errors name the field path and the reason."""

from __future__ import annotations

import json

import pytest

from app.spec import SpecError, load_spec, parse_spec

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
    assert spec.feedback_every() == 90


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
    from app.spec import decode_spec_text

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
    import app.spec as spec_module
    from app.spec import spec_from_stored

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
