"""pantheon-serve flags: every flag, binding to the most recent --model, defaults, every refusal."""

import pathlib

import pytest

from pantheon.serve import settings
from pantheon.errors import PantheonError, UsageError
from pantheon.serve.environment import Operations
from pantheon.serve.limits import MAX_NAME_BYTES
from pantheon.serve.settings import HelpRequested, ModelSpec, ServeConfig, parse_serve_args, usage_text

ROOT = pathlib.Path(__file__).resolve().parents[3]


def parse(*argv, env=None):
    return parse_serve_args(list(argv), {} if env is None else env)


def refused(*argv, env=None):
    with pytest.raises(UsageError) as e:
        parse(*argv, env=env)
    return str(e.value)


@pytest.fixture
def demo(monkeypatch):
    import pantheon.demo

    monkeypatch.setattr(pantheon.demo, "demo_model_path",
                        lambda: pathlib.Path("/bundled/pantheon-demo.gguf"), raising=False)


# ---- defaults


def test_one_model_defaults():
    c = parse("--model", "/models/small.gguf")
    assert c == ServeConfig(models=(ModelSpec("/models/small.gguf", "small.gguf", ("cpu0",), 4096, 0, 8, 8),),
                            host="127.0.0.1", port=8080, http_workers=2, batch_slots=4, cpu_dies=1,
                            quantize=False, api_keys=(), admin_token=None, models_dir=None,
                            ops=Operations())


def test_config_is_frozen():
    c = parse("--model", "a.gguf")
    with pytest.raises(AttributeError):
        c.port = 1
    with pytest.raises(AttributeError):
        c.models[0].name = "x"


def test_without_model_serves_the_demo(demo):
    (spec,) = parse().models
    assert (spec.path, spec.name, spec.dies) == ("/bundled/pantheon-demo.gguf", "pantheon-demo.gguf", ("cpu0",))


def test_served_name_names_the_demo(demo):
    assert parse("--served-name", "demo").models[0].name == "demo"


def test_zero_means_default_and_is_resolved():
    m = parse("--model", "a", "--ctx-cap", "0", "--max-sessions", "0", "--max-concurrent", "0").models[0]
    assert (m.ctx_cap, m.max_sessions, m.max_concurrent, m.reasoning_budget) == (4096, 8, 8, 0)


def test_max_concurrent_defaults_to_resolved_max_sessions():
    assert parse("--model", "a", "--max-sessions", "3").models[0].max_concurrent == 3
    m = parse("--model", "a", "--max-sessions", "3", "--max-concurrent", "2").models[0]
    assert (m.max_sessions, m.max_concurrent) == (3, 2)


# ---- every flag


def test_every_per_model_flag():
    m = parse("--model", "/m/big.gguf", "--name", "big", "--dies", "0,1", "--ctx-cap", "8192",
              "--reasoning-budget", "512", "--max-sessions", "16", "--max-concurrent", "4").models[0]
    assert m == ModelSpec("/m/big.gguf", "big", ("cuda0", "cuda1"), 8192, 512, 16, 4)


@pytest.mark.parametrize("value", ["none", "mean", "cls", "last", "rank"])
def test_pooling_takes_llama_cpps_pooling_types(value):
    assert parse("--model", "/m/a.gguf", "--pooling", value).models[0].pooling == value
    assert parse("--model", "/m/a.gguf").models[0].pooling == ""


@pytest.mark.parametrize("value", ["max", "NONE", "", "4"])
def test_pooling_refuses_anything_else_by_name(value):
    assert "--pooling" in refused("--model", "/m/a.gguf", "--pooling", value)


def test_every_global_flag(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nk-one\n\n  k-two  \n#k-three\n")
    c = parse("--model", "a", "--host", "0.0.0.0", "--port", "9000", "--quantize", "--http-workers", "4",
              "--batch-slots", "8", "--cpu-dies", "2", "--api-key", "k-zero", "--api-key-file", str(keys),
              "--admin-token", "s3cret", "--models-dir", str(tmp_path), "--responses-store", "0")
    assert c.responses_store_mb == 0 and parse("--model", "a").responses_store_mb == 256
    assert refused("--responses-store", "1048577") == "--responses-store 1048577: out of range 0..1048576"
    assert parse("--model", "a", "--sse-keepalive", "0").http.sse_keepalive == 0
    assert parse("--model", "a").http.sse_keepalive == 15
    assert parse("--model", "a").prefill_assistant and not parse("--model", "a", "--no-prefill-assistant").prefill_assistant
    assert refused("--sse-keepalive", "3601") == "--sse-keepalive 3601: out of range 0..3600"
    assert (c.host, c.port, c.quantize, c.http_workers, c.batch_slots, c.cpu_dies) == ("0.0.0.0", 9000, True, 4, 8, 2)
    assert c.api_keys == ("k-zero", "k-one", "k-two")
    assert (c.admin_token, c.models_dir) == ("s3cret", str(tmp_path))


def test_equals_form():
    c = parse("--model=a.gguf", "--name=x", "--port=81", "--dies=cpu0")
    assert (c.models[0].path, c.models[0].name, c.port) == ("a.gguf", "x", 81)


@pytest.mark.parametrize("host,stored", [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("[::1]", "::1"),
                                         ("localhost", "localhost"), ("fe80::1%eth0", "fe80::1%eth0")])
def test_host_literals(host, stored):
    assert parse("--model", "a", "--host", host).host == stored


def test_api_keys_repeat_and_dedupe():
    assert parse("--model", "a", "--api-key", "x1", "--api-key", "y2", "--api-key", "x1").api_keys == ("x1", "y2")


# ---- binding to the most recent --model


def test_per_model_flags_bind_to_most_recent_model():
    c = parse("--model", "/m/big.gguf", "--name", "big", "--dies", "0,1", "--port", "81",
              "--model", "/m/small.gguf", "--dies", "2", "--ctx-cap", "100")
    big, small = c.models
    assert (big.name, big.dies, big.ctx_cap) == ("big", ("cuda0", "cuda1"), 4096)
    assert (small.name, small.dies, small.ctx_cap) == ("small.gguf", ("cuda2",), 100)


def test_replicas_same_name():
    c = parse("--model", "w.gguf", "--name", "w", "--dies", "cpu0", "--model", "w.gguf", "--name", "w", "--dies", "cpu1")
    assert [(m.name, m.dies) for m in c.models] == [("w", ("cpu0",)), ("w", ("cpu1",))]


def test_served_name_only_model_zero_without_name():
    c = parse("--served-name", "alias", "--model", "a.gguf", "--model", "b.gguf")
    assert [m.name for m in c.models] == ["alias", "b.gguf"]
    c = parse("--model", "a.gguf", "--name", "mine", "--served-name", "alias")
    assert c.models[0].name == "mine"


@pytest.mark.parametrize("flag,value", [("--name", "x"), ("--dies", "0"), ("--ctx-cap", "1"),
                                        ("--reasoning-budget", "1"), ("--max-sessions", "1"),
                                        ("--max-concurrent", "1")])
def test_per_model_flag_before_any_model(flag, value):
    assert refused("--port", "81", flag, value, "--model", "a") == \
        f"{flag} before any --model: per-model flags bind to the most recent --model"


def test_sixteen_models_and_no_more():
    argv = [t for k in range(16) for t in ("--model", f"m{k}.gguf")]
    assert len(parse(*argv).models) == 16
    assert refused(*argv, "--model", "m16.gguf") == "--model m16.gguf: at most 16 models"


# ---- dies syntax


@pytest.mark.parametrize("text,names", [("0", ("cuda0",)), ("cuda3", ("cuda3",)), ("cpu1", ("cpu1",)),
                                        ("0, 2", ("cuda0", "cuda2")), ("cpu0,cpu1", ("cpu0", "cpu1")),
                                        ("0,1,2,3,4,5,6,7", tuple(f"cuda{k}" for k in range(8)))])
def test_dies_syntax(text, names):
    assert parse("--model", "a", "--dies", text).models[0].dies == names


@pytest.mark.parametrize("text,why", [
    ("", "an empty entry"), ("0,,1", "an empty entry"), ("0,", "an empty entry"),
    ("gpu0", "'gpu0' is not a die"), ("cpu", "'cpu' is not a die"), ("-1", "'-1' is not a die"),
    ("01", "'01' is not a die"), ("cuda0x", "'cuda0x' is not a die"), ("0 1", "'0 1' is not a die"),
    ("0,cuda0", "a die is named twice"), ("cpu1,cpu1", "a die is named twice"),
    ("0,1,2,3,4,5,6,7,8", "at most 8 dies per model, got 9"),
    ("cpu0,1", "a model runs on CPU dies or on CUDA dies, not both")])
def test_bad_dies(text, why):
    assert why in refused("--model", "a", "--dies=" + text)


# ---- numbers


@pytest.mark.parametrize("flag,lo,hi", [("--port", 0, 65535), ("--ctx-cap", 0, 1 << 20),
                                        ("--batch-slots", 1, 8), ("--http-workers", 1, 64),
                                        ("--cpu-dies", 1, 1024), ("--max-sessions", 0, 1024),
                                        ("--max-concurrent", 0, 1024), ("--reasoning-budget", 0, 1 << 20)])
def test_number_bounds(flag, lo, hi):
    ok = parse("--model", "a", flag, str(hi))
    assert hi in (getattr(ok, flag[2:].replace("-", "_"), None), getattr(ok.models[0], flag[2:].replace("-", "_"), None))
    assert refused("--model", "a", flag, str(hi + 1)) == f"{flag} {hi + 1}: out of range {lo}..{hi}"
    if lo > 0:
        assert refused("--model", "a", flag, str(lo - 1)) == f"{flag} {lo - 1}: out of range {lo}..{hi}"
    assert refused("--model", "a", flag, "-3") == f"{flag} -3: must not be negative (expected {lo}..{hi})"


@pytest.mark.parametrize("text", ["abc", "80x", "0x50", "8_0", "8.0", "+80", " 80", "", "٣", "9" * 40])
def test_port_is_not_atoi(text):
    msg = refused("--model", "a", "--port", text)
    assert msg.startswith("--port") and ("expected a whole number in 0..65535" in msg or "out of range" in msg)


# ---- other refusals


@pytest.mark.parametrize("host", ["example.com", "256.1.1.1", "127.0.0.01", "1.2.3", "", "::g", "[::1"])
def test_bad_host(host):
    assert refused("--model", "a", "--host", host) == f"--host {host!r}: not an IPv4/IPv6 address literal or 'localhost'"


def test_unknown_flag_with_hint():
    assert refused("--model", "a", "--prot", "80") == "unknown flag '--prot'; did you mean --port?"
    assert refused("--model", "a", "--frobnicate") == "unknown flag '--frobnicate'"
    assert refused("-x") == "unknown flag '-x'"


def test_positional_argument():
    assert refused("a.gguf") == "unexpected argument 'a.gguf' (model paths follow --model)"


@pytest.mark.parametrize("flag", ["--model", "--name", "--port", "--host", "--dies", "--api-key", "--batch-slots"])
def test_missing_value_at_end(flag):
    argv = ("--model", "a", flag) if flag != "--model" else (flag,)
    assert refused(*argv).startswith(f"{flag}: missing value ")


def test_missing_value_before_next_flag():
    assert refused("--model", "a", "--name", "--dies", "0") == "--name: missing value ID (got flag '--dies')"


def test_switch_takes_no_value():
    assert refused("--model", "a", "--quantize=yes") == "--quantize takes no value, got '--quantize=yes'"


def test_given_twice():
    assert refused("--model", "a", "--port", "1", "--port", "2") == "--port given twice"
    assert refused("--model", "a", "--name", "x", "--name", "y") == "--name given twice for --model a"


@pytest.mark.parametrize("name", ["", "two words", "tab\tname", "é"])
def test_bad_model_id(name):
    assert "a model id is printable ASCII" in refused("--model", "a", "--name", name)


def test_model_path_without_file_name():
    assert refused("--model", "/") == "--model '/': no file name to serve it under; give --name"
    assert parse("--model", "/", "--name", "x").models[0].name == "x"
    assert refused("--model=") == "--model '': expected a file path"


def test_vocab_not_supported():
    assert "not supported yet" in refused("--model", "a", "--vocab", "x.json")


def test_config_binds_to_its_model():
    cfg = parse("--model", "a.gguf", "--model", "w.safetensors", "--config", "c/config.json")
    assert [m.config for m in cfg.models] == ["", "c/config.json"]
    assert refused("--config", "c.json") == "--config before any --model: per-model flags bind to the most recent --model"
    assert "given twice" in refused("--model", "w.safetensors", "--config", "a", "--config", "b")


def test_bad_secrets_are_not_echoed():
    msg = refused("--model", "a", "--api-key", "has space")
    assert "has space" not in msg and msg.startswith("--api-key:")
    msg = refused("--model", "a", "--admin-token", "")
    assert msg.startswith("--admin-token:")


def test_key_file_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("# nothing here\n\n")
    assert refused("--model", "a", "--api-key-file", str(empty)) == f"--api-key-file {str(empty)!r}: no keys in the file"
    bad = tmp_path / "bad"
    bad.write_text("good\nbad key\n")
    msg = refused("--model", "a", "--api-key-file", str(bad))
    assert msg.startswith(f"--api-key-file {str(bad)!r} line 2:") and "bad key" not in msg
    missing = tmp_path / "missing"
    assert refused("--model", "a", "--api-key-file", str(missing)).startswith(f"--api-key-file {str(missing)!r}: cannot read")


def test_models_dir_must_exist(tmp_path):
    assert refused("--model", "a", "--models-dir", str(tmp_path / "no")) == f"--models-dir {str(tmp_path / 'no')!r}: not a directory"


def test_usage_error_is_typed():
    with pytest.raises(PantheonError):
        parse("--bogus")


# ---- help


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(flag):
    with pytest.raises(HelpRequested):
        parse("--model", "a", flag)


def test_usage_text_lists_every_flag():
    text = usage_text()
    for f in settings.FLAGS:
        assert f.name in text
    assert "QWEN35_BATCH_SLOTS" in text


def test_docs_document_every_flag():
    doc = (ROOT / "docs" / "cli.md").read_text()
    for f in settings.FLAGS:
        assert f"`{f.name}`" in doc, f.name


# ---- the QWEN35_BATCH_SLOTS alias


@pytest.mark.parametrize("raw,slots", [("1", 1), ("8", 8), (" 3 ", 3), ("", 4)])
def test_batch_slots_env_alias(raw, slots):
    assert parse("--model", "a", env={"QWEN35_BATCH_SLOTS": raw}).batch_slots == slots


def test_batch_slots_env_unset_is_default():
    assert parse("--model", "a", env={}).batch_slots == 4


@pytest.mark.parametrize("raw,msg", [("yes", "QWEN35_BATCH_SLOTS 'yes': expected a whole number in 1..8"),
                                     ("1x", "QWEN35_BATCH_SLOTS '1x': expected a whole number in 1..8"),
                                     ("0", "QWEN35_BATCH_SLOTS 0: out of range 1..8"),
                                     ("9", "QWEN35_BATCH_SLOTS 9: out of range 1..8"),
                                     ("-2", "QWEN35_BATCH_SLOTS -2: must not be negative (expected 1..8)")])
def test_batch_slots_env_garbage(raw, msg):
    assert refused("--model", "a", env={"QWEN35_BATCH_SLOTS": raw}) == msg


def test_batch_slots_flag_wins_over_env():
    assert parse("--model", "a", "--batch-slots", "2", env={"QWEN35_BATCH_SLOTS": "6"}).batch_slots == 2
    assert parse("--model", "a", "--batch-slots", "2", env={"QWEN35_BATCH_SLOTS": "junk"}).batch_slots == 2


def test_environ_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("QWEN35_BATCH_SLOTS", "5")
    assert parse_serve_args(["--model", "a"]).batch_slots == 5


def test_names_and_paths_longer_than_a_slot_record_are_refused_not_cut():
    long_name = "n" * (MAX_NAME_BYTES + 1)
    with pytest.raises(UsageError, match="at most 64"):
        parse("--model", "/m.gguf", "--name", long_name)
    assert parse("--model", "/m.gguf", "--name", "n" * 64).models[0].name == "n" * 64
    with pytest.raises(UsageError, match="--name"):
        parse("--model", "/models/" + "f" * 70)  # the default name, from the file name, is checked too
    with pytest.raises(UsageError, match="at most 1024 bytes"):
        parse("--model", "/" + "é" * 512)  # 1025 bytes of UTF-8
    assert parse("--model", "/" + "p" * 1023, "--name", "p").models[0].path == "/" + "p" * 1023


def test_model_spec_resolves_parsed_values_like_the_command_line():
    values = {"--model": "/m/x.gguf", "--ctx-cap": 0, "--max-sessions": 3}
    assert settings.model_spec(values) == parse("--model", "/m/x.gguf", "--ctx-cap", "0",
                                                "--max-sessions", "3").models[0]
    assert settings.parse_flag("--ctx-cap", "12", label="ctx_cap") == 12
    with pytest.raises(UsageError, match="^ctx_cap 99999999"):
        settings.parse_flag("--ctx-cap", "99999999", label="ctx_cap")
