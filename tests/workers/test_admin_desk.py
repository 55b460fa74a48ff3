"""The admin desk's parsing of a load body: the same parsers and defaults as `--model`, typed refusals."""

import pytest

from pantheon.serve.dies import Die
from pantheon.serve.settings import batch_slots_of, parse_serve_args
from workers.admin_desk import AdminDesk, Refusal
from workers.layout import Layout
from workers.tables import SLOT_LOADED


@pytest.fixture
def desk(tmp_path):
    (tmp_path / "small.gguf").write_bytes(b"GGUF")
    (tmp_path / "a b").mkdir()  # an HF model directory whose name is no model id
    dies = [Die("cpu0", "cpu", 0, cores=(0,)), Die("cpu1", "cpu", 1, cores=(1,))]
    layout = Layout.create(1, 2, ["base"], [d.name for d in dies], dies)
    layout.tables.write_slot(0, state=SLOT_LOADED, name="base", path="/m/base.gguf", dies=1)
    config = parse_serve_args(["--batch-slots", "3", "--models-dir", str(tmp_path)], {})
    return AdminDesk(config, dies, layout.tables, book=None, post=None, admission=None, load_slot=None,
                     in_flight=None), tmp_path


@pytest.mark.parametrize("body,argv", [
    ({"path": "small.gguf"}, []),
    ({"path": "small.gguf", "name": "s", "dies": ["cpu1", "cpu0"], "ctx_cap": 0}, ["--name", "s", "--dies",
                                                                                  "cpu1,cpu0", "--ctx-cap", "0"]),
    ({"path": "small.gguf", "dies": "cpu1", "max_sessions": 2, "reasoning_budget": 64},
     ["--dies", "cpu1", "--max-sessions", "2", "--reasoning-budget", "64"]),
    ({"path": "small.gguf", "max_concurrent": 2, "batch_slots": 8}, ["--max-concurrent", "2"]),
])
def test_a_load_body_means_what_the_same_flags_mean(desk, body, argv):
    desk, root = desk
    config = parse_serve_args(["--model", str(root / "small.gguf"), *argv, "--batch-slots",
                               str(body.get("batch_slots", 3))], {})
    spec = config.models[0]
    assert desk._spec(body) == (spec, batch_slots_of(spec, config.batch_slots))


@pytest.mark.parametrize("body,param,code", [
    ({"path": "small.gguf", "ctx_cap": 1 << 21}, "ctx_cap", "invalid_value"),
    ({"path": "small.gguf", "ctx_cap": "4k"}, "ctx_cap", "invalid_value"),
    ({"path": "small.gguf", "ctx_cap": True}, "ctx_cap", "invalid_type"),
    ({"path": "small.gguf", "name": "n" * 65}, "name", "invalid_value"),
    ({"path": "small.gguf", "name": "a b"}, "name", "invalid_value"),
    ({"path": "a b"}, "name", "invalid_value"),
    ({"path": "small.gguf", "dies": ["cpu7"]}, "dies", "invalid_value"),
    ({"path": "small.gguf", "dies": "cpu0,cpu0"}, "dies", "invalid_value"),
    ({"path": "small.gguf", "batch_slots": 9}, "batch_slots", "invalid_value"),
    ({"path": "small.gguf", "max_sessions": {"x": 1}}, "max_sessions", "invalid_type"),
])
def test_a_bad_field_is_refused_naming_it(desk, body, param, code):
    with pytest.raises(Refusal) as refused:
        desk[0]._spec(body)
    error = refused.value.body()["error"]
    assert (refused.value.status, error["code"], error["param"]) == (400, code, param), error


def test_a_served_name_is_taken(desk):
    with pytest.raises(Refusal) as refused:
        desk[0]._spec({"path": "small.gguf", "name": "base"})
    assert (refused.value.status, refused.value.code) == (409, "name_exists")
