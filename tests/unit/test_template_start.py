"""Starting the trial template early: reading the trainable's module from a spec without validating it,
and closing a template no runtime adopted."""

from __future__ import annotations

import json
import os

from quanta.executor.runtime.template import spec_module, start_template


def test_spec_module_reads_yaml_and_json_and_gives_up_quietly(tmp_path):
    (tmp_path / "a.yaml").write_text("name: x\ntrainable: examples.mnist1d:train\nspace: {}\n")
    (tmp_path / "b.json").write_text(json.dumps({"trainable": "pkg.mod:fn"}))
    (tmp_path / "c.yaml").write_text("name: [unclosed\n")
    (tmp_path / "d.yaml").write_text("name: no trainable\n")
    assert spec_module(tmp_path / "a.yaml") == "examples.mnist1d"
    assert spec_module(tmp_path / "b.json") == "pkg.mod"
    assert spec_module(tmp_path / "c.yaml") is None
    assert spec_module(tmp_path / "d.yaml") is None
    assert spec_module(tmp_path / "missing.yaml") is None


def test_a_template_no_runtime_adopted_is_stopped_and_its_socket_removed(tmp_path):
    tpl = start_template([], workdir=str(tmp_path))
    assert os.path.exists(tpl.address) and tpl.process.poll() is None
    tpl.close()
    assert tpl.process.poll() is not None
    assert not os.path.exists(tpl.tmp)
