"""Starting the trial template early: reading the trainable's module from a spec without validating it,
and closing a template no runtime adopted."""

from __future__ import annotations

import json
import os

from quanta.executor.runtime.template import spec_trainable, start_template, template_path


def test_spec_trainable_reads_the_trainable_line_and_gives_up_quietly(tmp_path):
    (tmp_path / "a.yaml").write_text("name: x\ntrainable: examples.mnist1d:train\nspace: {}\n")
    (tmp_path / "b.json").write_text(json.dumps({"trainable": "pkg.mod:fn"}))
    (tmp_path / "c.yaml").write_text("name: [unclosed\n")
    (tmp_path / "d.yaml").write_text("name: no trainable\n")
    (tmp_path / "e.yaml").write_text("name: x\ntrainable: 'src/train.py:train'  # a file beside the spec\n")
    (tmp_path / "f.yaml").write_text("name: x\ntrainable: no_function_named\n")
    (tmp_path / "g.yaml").write_text("name: x\nconfig:\n  trainable: pkg.mod:fn\n")  # not the top-level one
    assert spec_trainable(tmp_path / "a.yaml") == "examples.mnist1d:train"
    assert spec_trainable(tmp_path / "b.json") == "pkg.mod:fn"
    assert spec_trainable(tmp_path / "e.yaml") == "src/train.py:train"
    for name in ("c.yaml", "d.yaml", "f.yaml", "g.yaml", "missing.yaml"):
        assert spec_trainable(tmp_path / name) is None, name


def test_a_template_no_runtime_adopted_is_stopped_and_its_socket_removed(tmp_path):
    tpl = start_template([], workdir=str(tmp_path))
    assert os.path.exists(tpl.address) and tpl.process.poll() is None
    assert tpl.path == template_path()  # what it can import from, said
    tpl.close()
    assert tpl.process.poll() is not None
    assert not os.path.exists(tpl.tmp)
