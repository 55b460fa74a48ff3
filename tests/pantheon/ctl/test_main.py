"""pantheon-ctl: argument parsing and every refusal, exit statuses, commands end to end against a stub server."""

import io
import json
import pathlib
import subprocess
import sys

import pytest

from pantheon.ctl import main as ctl
from pantheon.ctl.main import Invocation, parse_ctl_args
from pantheon.errors import UsageError
from pantheon.serve.settings import HelpRequested
from tests.pantheon.ctl.stub import DIES, HEALTH, MODELS, StubServer, error
from tests.pantheon.ctl.test_fit import availabilities, demo
from tests.pantheon.ctl.test_client import closed_port_url

ROOT = pathlib.Path(__file__).resolve().parents[3]


def parse(*argv, env=None):
    return parse_ctl_args(list(argv), {} if env is None else env)


def refused(*argv, env=None):
    with pytest.raises(UsageError) as e:
        parse(*argv, env=env)
    return str(e.value)


def run(*argv, env=None):
    out, err = io.StringIO(), io.StringIO()
    rc = ctl.main(list(argv), {} if env is None else env, out, err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def stub():
    with StubServer() as s:
        yield s


# ---- parsing


def test_defaults():
    assert parse("list") == Invocation(command="list", target=None, url="http://127.0.0.1:8080", token=None,
                                       json=False, http_timeout=30.0)


def test_every_load_flag_and_equals_form():
    inv = parse("load", "/m/big.gguf", "--name", "big", "--dies=cpu0,cpu1", "--ctx", "8192", "--slots=2",
                "--timeout", "600")
    assert (inv.command, inv.target, inv.name, inv.dies, inv.ctx, inv.slots, inv.op_timeout) == (
        "load", "/m/big.gguf", "big", ("cpu0", "cpu1"), 8192, 2, 600)


def test_dies_are_canonical():
    assert parse("fit", "m.gguf", "--dies", "0,cuda1").dies == ("cuda0", "cuda1")


def test_global_flags_before_or_after_the_command(tmp_path):
    a = parse("--json", "--url", "http://h:1", "--token", "t0k", "dies")
    b = parse("dies", "--json", "--url", "http://h:1/", "--token=t0k")
    assert a == b == Invocation(command="dies", url="http://h:1", token="t0k", json=True)


def test_timeout_before_is_http_after_load_is_the_loads():
    inv = parse("--timeout", "2.5", "load", "x.gguf", "--timeout", "60")
    assert (inv.http_timeout, inv.op_timeout) == (2.5, 60)
    assert parse("list", "--timeout", "7").http_timeout == 7
    assert parse("unload", "x", "--timeout", "0").op_timeout == 0


def test_url_from_environment_and_flag_wins():
    assert parse("list", env={"PANTHEON_URL": "https://admin.example:9443/"}).url == "https://admin.example:9443"
    assert parse("list", "--url", "http://[::1]:81", env={"PANTHEON_URL": "not a url"}).url == "http://[::1]:81"
    assert parse("list", env={"PANTHEON_URL": "  "}).url == "http://127.0.0.1:8080"


def test_token_file(tmp_path):
    f = tmp_path / "token"
    f.write_text("# admin token\n\n  s3cret  \n")
    assert parse("list", "--token-file", str(f)).token == "s3cret"


def test_double_dash_ends_flags():
    assert parse("load", "--name", "n", "--", "-odd.gguf").target == "-odd.gguf"


@pytest.mark.parametrize("text,value", [("1024", 1024), ("8G", 8 << 30), ("512MiB", 512 << 20), ("2k", 2048),
                                        ("1TB", 1 << 40)])
def test_available_sizes(text, value):
    assert parse("fit", "m", "--available", text).available == value


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["load", "-h"], ["list", "-h"], ["--json", "-h"]])
def test_help(argv):
    with pytest.raises(HelpRequested):
        parse(*argv)


def test_help_exits_0_and_names_every_command_and_flag():
    rc, out, err = run("-h")
    assert (rc, err) == (0, "")
    for c in ctl.COMMANDS.values():
        assert f"  {c.name}" in out
        for f in c.flags:
            assert f.name in out
    for f in ctl.GLOBAL_FLAGS:
        assert f.name in out


# ---- every refusal of the command line


@pytest.mark.parametrize("argv,message", [
    ([], "missing command: one of list, dies, health, load, unload, fit"),
    (["lst"], "unknown command 'lst'; did you mean list?"),
    (["list", "extra"], "list takes no argument, got 'extra'"),
    (["load"], "load: missing PATH"),
    (["load", "a", "b"], "load: unexpected argument 'b' (one PATH)"),
    (["unload"], "unload: missing NAME"),
    (["unload", "two words"], "NAME 'two words': a model id is printable ASCII"),
    (["fit"], "fit: missing MODEL"),
    (["list", "--bogus"], "unknown flag '--bogus' for list"),
    (["load", "a", "--nme", "x"], "unknown flag '--nme' for load; did you mean --name?"),
    (["--name", "x", "load", "a"], "--name before the command: it belongs after the command"),
    (["--bogus", "list"], "unknown flag '--bogus' before the command"),
    (["unload", "x", "--dies", "cpu0"], "unknown flag '--dies' for unload"),
    (["list", "--slots", "2"], "unknown flag '--slots' for list"),
    (["list", "--json", "--json"], "--json given twice"),
    (["load", "a", "--timeout", "1", "--timeout", "2"], "--timeout given twice"),
    (["list", "--json=1"], "--json takes no value, got '--json=1'"),
    (["list", "--url"], "--url: missing value URL"),
    (["list", "--url", "--json"], "--url: missing value URL (got flag '--json')"),
    (["list", "--url", "ftp://h"], "--url 'ftp://h': expected http://HOST[:PORT]"),
    (["list", "--url", "127.0.0.1:8080"], "expected http://HOST[:PORT]"),
    (["list", "--url", "http://h:99999"], "--url 'http://h:99999': not a URL"),
    (["list", "--url", "http://u:p@h"], "no query, fragment or user:password"),
    (["list", "--url", "http://h/?a=1"], "no query, fragment or user:password"),
    (["list", "--timeout", "0"], "--timeout 0: out of range"),
    (["list", "--timeout", "-1"], "--timeout -1: must not be negative"),
    (["list", "--timeout", "soon"], "--timeout 'soon': expected seconds"),
    (["list", "--timeout", "1e3"], "--timeout '1e3': expected seconds"),
    (["list", "--timeout", "86401"], "out of range"),
    (["load", "a", "--timeout", "0"], "--timeout 0: out of range 1..3600"),
    (["load", "a", "--timeout", "1.5"], "--timeout '1.5': expected a whole number in 1..3600"),
    (["unload", "a", "--timeout", "3601"], "--timeout 3601: out of range 0..3600"),
    (["load", "a", "--dies", "cpu0,0"], "not both"),
    (["load", "a", "--dies", "gpu0"], "'gpu0' is not a die"),
    (["load", "a", "--dies", "cpu0,cpu0"], "a die is named twice"),
    (["load", "a", "--ctx", "0"], "--ctx 0: out of range 1..1048576"),
    (["load", "a", "--ctx", "-5"], "--ctx -5: must not be negative"),
    (["load", "a", "--slots", "9"], "--slots 9: out of range 1..8"),
    (["load", "a", "--name="], "--name '': a model id"),
    (["load", ""], "PATH '': expected a file path"),
    (["fit", "m", "--available", "lots"], "--available 'lots': expected bytes"),
    (["fit", "m", "--available", "0"], "--available 0: must be more than 0 bytes"),
    (["fit", "m", "--available", "iB"], "expected bytes"),
    (["fit", "m", "--available", "5X"], "expected bytes"),
])
def test_usage_errors(argv, message):
    assert message in refused(*argv)


def test_url_env_is_validated():
    assert "PANTHEON_URL 'nope': expected http" in refused("list", env={"PANTHEON_URL": "nope"})


def test_token_is_never_echoed():
    assert "a b" not in refused("list", "--token", "a b")
    assert "value not shown" in refused("list", "--token", "a b")


def test_token_and_token_file_exclude(tmp_path):
    f = tmp_path / "t"
    f.write_text("x\n")
    assert "--token and --token-file: give one of them" in refused("list", "--token", "y", "--token-file", str(f))


@pytest.mark.parametrize("text,message", [("", "found 0"), ("# only a comment\n", "found 0"),
                                          ("a\nb\n", "found 2"), ("has space\n", "value not shown")])
def test_token_file_refusals(tmp_path, text, message):
    f = tmp_path / "t"
    f.write_text(text)
    assert message in refused("list", "--token-file", str(f))


def test_token_file_missing(tmp_path):
    assert "cannot read" in refused("list", "--token-file", str(tmp_path / "absent"))


def test_usage_error_exits_2_naming_the_problem():
    rc, out, err = run("load", "a", "--slots", "99")
    assert (rc, out) == (2, "")
    assert err == "pantheon-ctl: --slots 99: out of range 1..8\n(see pantheon-ctl -h)\n"


# ---- commands against the stub server


def test_list_table(stub):
    rc, out, err = run("list", "--url", stub.url)
    assert (rc, err) == (0, "")
    assert out.splitlines()[0].split() == ["NAME", "STATE", "DIES", "IN-FLIGHT", "CTX", "PATH"]
    assert [line.split()[0] for line in out.splitlines()[1:4]] == ["big", "small", "broken"]
    assert "broken: failed: worker exited with signal 9" in out


def test_list_json_is_the_servers_json(stub):
    rc, out, _ = run("list", "--json", env={"PANTHEON_URL": stub.url})
    assert (rc, json.loads(out)) == (0, MODELS)


def test_dies_table_and_json(stub):
    rc, out, _ = run("dies", "--url", stub.url)
    assert rc == 0
    assert out.splitlines()[0].split() == ["DIE", "KIND", "STATE", "PID", "RESTARTS", "IN-FLIGHT", "MODELS", "MEMORY"]
    assert out.endswith("pressure: WATCH (available=12884901888)\n")
    assert json.loads(run("dies", "--url", stub.url, "--json")[1]) == DIES


def test_token_is_sent_as_bearer(stub, tmp_path):
    f = tmp_path / "t"
    f.write_text("tok-1\n")
    run("list", "--url", stub.url, "--token-file", str(f))
    assert stub.requests[0]["headers"]["Authorization"] == "Bearer tok-1"


def test_health_ok_and_unavailable(stub):
    assert run("health", "--url", stub.url)[:2] == (0, "status: ok\n" + "".join(
        ["NAME  STATE   REPLICAS  CTX   RUNNING  QUEUED\n", "big   loaded  1         4096  2        1\n"]))
    assert json.loads(run("health", "--url", stub.url, "--json")[1]) == HEALTH
    stub.routes[("GET", "/health")] = (503, {"status": "unavailable", "models": {}})
    assert run("health", "--url", stub.url) == (4, "status: unavailable\nno models\n", "")


def test_load_sends_the_contract_and_reports(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": MODELS["models"][1]})
    rc, out, err = run("load", "/m/big.gguf", "--url", stub.url, "--name", "big", "--dies", "cpu0,cpu1",
                       "--ctx", "4096", "--slots", "2", "--timeout", "60")
    assert (rc, out, err) == (0, "loaded big on cpu0,cpu1 (slot 0, ctx 4096, loaded)\n", "")
    assert stub.requests[0]["body"] == {"path": "/m/big.gguf", "name": "big", "dies": ["cpu0", "cpu1"],
                                        "ctx_cap": 4096, "batch_slots": 2, "timeout": 60}


def test_load_defaults(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": MODELS["models"][1]})
    assert run("load", "big.gguf", "--url", stub.url)[0] == 0
    assert stub.requests[0]["body"] == {"path": "big.gguf", "name": None, "dies": None, "ctx_cap": None,
                                        "batch_slots": None, "timeout": ctl.DEFAULT_LOAD_TIMEOUT}


def test_load_sends_the_per_model_fields_only_when_given(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": MODELS["models"][1]})
    assert run("load", "e.gguf", "--url", stub.url, "--pooling", "none", "--max-sessions", "8",
               "--max-concurrent=4", "--reasoning-budget", "0")[0] == 0
    body = stub.requests[0]["body"]
    assert (body["pooling"], body["max_sessions"], body["max_concurrent"], body["reasoning_budget"]) == ("none", 8, 4, 0)


@pytest.mark.parametrize("flag, value", [("--pooling", "sum"), ("--max-sessions", "-1"),
                                         ("--max-concurrent", "many"), ("--reasoning-budget", "1.5")])
def test_bad_per_model_load_fields_are_usage_errors_and_send_nothing(stub, flag, value):
    rc, out, err = run("load", "e.gguf", "--url", stub.url, flag, value)
    assert rc == 2 and flag in err and not stub.requests


def test_load_sends_an_hf_config(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": MODELS["models"][1]})
    assert run("load", "m/model.safetensors", "--config", "meta/config.json", "--url", stub.url)[0] == 0
    assert stub.requests[0]["body"]["config"] == "meta/config.json"


def test_fit_of_an_hf_directory_reads_its_config(tmp_path):
    from tests.pantheon.hf.tinyhf import make_hf

    d, _, _ = make_hf(tmp_path / "m", "qwen3_moe")
    rc, out, _ = run("fit", str(d), "--available", "64G", "--json")
    report = json.loads(out)
    assert rc == 0 and report["verdict"] == "FITS" and report["estimate"]["arch"] == "qwen3moe"
    (d / "config.json").rename(tmp_path / "config.json")
    rc, out, _ = run("fit", str(d / "model.safetensors"), "--config", str(tmp_path / "config.json"),
                     "--available", "64G", "--json")
    assert rc == 0 and json.loads(out)["estimate"]["arch"] == "qwen3moe"


def test_load_waits_past_the_http_timeout_for_the_servers_answer(stub):
    stub.routes[("POST", "/admin/models/load")] = (200, {"model": MODELS["models"][1]}, 0.5)
    assert run("--timeout", "0.1", "load", "big.gguf", "--url", stub.url, "--timeout", "1")[0] == 0


def test_unload(stub):
    stub.routes[("POST", "/admin/models/unload")] = (200, {"model": MODELS["models"][1], "aborted": 2})
    assert run("unload", "big", "--url", stub.url) == (0, "unloaded big (2 in-flight request(s) aborted)\n", "")
    assert stub.requests[0]["body"] == {"name": "big", "timeout": ctl.DEFAULT_UNLOAD_TIMEOUT}


@pytest.mark.parametrize("status,code,rc", [(400, "invalid_path", 3), (403, "admin_disabled", 3),
                                            (404, "model_not_found", 3), (409, "name_exists", 3),
                                            (422, "load_failed", 3), (500, "internal_error", 4),
                                            (503, "unavailable", 4), (504, "timeout", 4)])
def test_load_errors_map_to_exit_statuses(stub, status, code, rc):
    stub.routes[("POST", "/admin/models/load")] = error(status, f"the server says {code}", code)
    assert run("load", "x.gguf", "--url", stub.url) == (
        rc, "", f"pantheon-ctl: load: HTTP {status} {code}: the server says {code}\n")


def test_401_without_token_hints_at_the_token(stub):
    stub.routes[("GET", "/admin/models")] = error(401, "missing or incorrect admin token", "invalid_admin_token")
    rc, _, err = run("list", "--url", stub.url)
    assert rc == 3 and "missing or incorrect admin token (no token was sent: give --token" in err
    rc, _, err = run("list", "--url", stub.url, "--token", "wrong")
    assert rc == 3 and "no token was sent" not in err


def test_does_not_fit_prints_the_estimate(stub):
    stub.routes[("POST", "/admin/models/load")] = error(409, "big does not fit: needs 10 GiB", "does_not_fit",
                                                        estimate={"total": 10 << 30, "available": 1 << 30})
    rc, out, err = run("load", "big.gguf", "--url", stub.url)
    assert (rc, out) == (3, "")
    assert err == ("pantheon-ctl: load: HTTP 409 does_not_fit: big does not fit: needs 10 GiB\n"
                   "  total      10.0 GiB (10,737,418,240 bytes)\n"
                   "  available   1.0 GiB (1,073,741,824 bytes)\n")


def test_errors_under_json_print_the_servers_body(stub):
    body = error(404, "no served model 'x'", "model_not_found")[1]
    stub.routes[("POST", "/admin/models/unload")] = (404, body)
    rc, out, err = run("unload", "x", "--url", stub.url, "--json")
    assert (rc, json.loads(out)) == (3, body)
    assert "no served model 'x'" in err


def test_unreachable_server_exits_4():
    rc, out, err = run("list", "--url", closed_port_url())
    assert (rc, out) == (4, "")
    assert "connection refused (is pantheon-serve running?)" in err


def test_timeout_exits_4(stub):
    stub.routes[("GET", "/admin/dies")] = (200, DIES, 1.0)
    rc, _, err = run("dies", "--url", stub.url, "--timeout", "0.2")
    assert rc == 4 and "no answer within 0.2 s" in err


@pytest.mark.parametrize("route,answer", [(("GET", "/admin/models"), {"models": "none"}),
                                          (("GET", "/admin/dies"), {"pressure": {}}),
                                          (("POST", "/admin/models/unload"), {"aborted": 0})])
def test_answers_of_the_wrong_shape_exit_4(stub, route, answer):
    stub.routes[route] = (200, answer)
    argv = {"/admin/models": ["list"], "/admin/dies": ["dies"], "/admin/models/unload": ["unload", "x"]}[route[1]]
    rc, _, err = run(*argv, "--url", stub.url)
    assert rc == 4 and "unexpected answer from the server" in err


def test_launcher_runs(stub):
    proc = subprocess.run([sys.executable, str(ROOT / "bin" / "pantheon-ctl"), "list", "--url", stub.url, "--json"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert (proc.returncode, json.loads(proc.stdout)) == (0, MODELS)


# ---- fit: exit statuses (the report itself: test_ctl_fit.py)


def test_fit_exit_statuses():
    assert ctl.FIT_EXIT == {"FITS": 0, "FITS-TIGHT": 1, "DOES-NOT-FIT": 3, "REFUSED": 3}


def test_fit_exit_status_is_the_verdicts():
    fit = pytest.importorskip("pantheon.serve.fit")
    found = availabilities(fit, fit.estimate(demo(), dies=("cpu0",), ctx=4096, slots=4, shared_files=()))
    assert set(found) == {"FITS", "FITS-TIGHT", "DOES-NOT-FIT"}
    for kind, available in found.items():
        rc, out, err = run("fit", demo(), "--available", str(available))
        assert (rc, err) == (ctl.FIT_EXIT[kind], "")
        assert out.startswith(f"{kind}: ")
        report = json.loads(run("fit", demo(), "--available", str(available), "--json")[1])
        assert (report["verdict"], report["available"]) == (kind, available)


def test_fit_missing_file_exits_2(tmp_path):
    pytest.importorskip("pantheon.serve.fit")
    rc, out, err = run("fit", str(tmp_path / "absent.gguf"), "--available", "1G")
    assert (rc, out) == (2, "")
    assert "absent.gguf" in err and "cannot read" in err


# ---- docs


def test_docs_document_every_command_flag_and_exit_status():
    doc = (ROOT / "docs" / "cli.md").read_text()
    section = doc[doc.index("## `pantheon-ctl`"):]
    for c in ctl.COMMANDS.values():
        assert f"`{c.name}" in section, c.name
        for f in c.flags:
            assert f"`{f.name}`" in section, f.name
    for f in ctl.GLOBAL_FLAGS:
        assert f"`{f.name}`" in section, f.name
    for status in range(5):
        assert f"| {status} |" in section, status
