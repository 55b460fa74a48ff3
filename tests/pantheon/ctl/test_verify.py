"""pantheon-ctl verify and bench: against the demo and golden models on a real server, and against
a test double whose one fault the right check must catch."""

import io
import json
import shutil

import pytest

from pantheon.ctl.main import main
from pantheon.demo import demo_model_path
from tests.conftest import shared_path
from tests.pantheon.ctl.openai_double import FAULTS, Double
from tests.workers.serving import Server

FULL = ["health", "models", "chat", "streaming", "stop", "ctx-refusal", "tools", "json-schema", "concurrency",
        "cache-reuse"]
# fault of the double -> (the checks that must FAIL, a phrase the first one's figures must hold); a
# fault in /v1/models also fails ctx-refusal, which needs the context length listed there
CAUGHT_BY = {
    "unhealthy": (["health"], "model state loading"),
    "unlisted": (["models", "ctx-refusal"], "not in /v1/models"),
    "bad_usage": (["chat"], "usage"),
    "no_done": (["streaming"], "without data: [DONE]"),
    "ignore_stop": (["stop"], "finish length"),
    "no_ctx_check": (["ctx-refusal"], "HTTP 200"),
    "no_tools": (["tools"], "no tool_calls"),
    "schema_ignored": (["json-schema"], "does not validate (not a JSON object"),
    "schema_truncated": (["json-schema"], "truncated: finish length at max_tokens 96"),
    "racy": (["concurrency"], "differ or failed"),
    "no_session_cache": (["cache-reuse"], "history was prefilled again: turn 2 reused 0 of"),
    "no_prefix_cache": (["cache-reuse"], "a repeated prompt was prefilled again (no prefix cache across requests)"),
}


def ctl(*args):
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(args), environ={}, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def outcomes(out):
    return {c["name"]: c for c in json.loads(out.splitlines()[-1])["checks"]}


def assert_full_passes(rc, out):
    """Every check passes; tools may SKIP only where the model's chat template has no tools."""
    checks = outcomes(out)
    assert list(checks) == FULL
    for name, c in checks.items():
        if c["status"] == "SKIP":
            assert name == "tools" and "template" in c["figures"], c
        else:
            assert c["status"] == "PASS", c
    assert rc == 0 and out.splitlines()[-2].startswith("PASS: ")
    return checks


@pytest.fixture(scope="module")
def demo_server():
    srv = Server(["--model", str(demo_model_path()), "--name", "demo"])
    yield srv
    srv.stop()


def test_smoke_on_the_demo_model(demo_server):
    rc, out, _ = ctl("--url", demo_server.url, "verify", "demo")
    assert rc == 0 and [c["status"] for c in outcomes(out).values()] == ["PASS"] * 3
    assert "context_length 256" in outcomes(out)["models"]["figures"]     # the demo's trained context, not the cap


def test_verify_full_on_the_demo_model(demo_server):
    rc, out, _ = ctl("--url", demo_server.url, "verify", "--full", "demo")
    checks = assert_full_passes(rc, out)
    assert checks["tools"]["status"] == "PASS"                            # the demo's template has tools
    assert checks["json-schema"]["figures"].startswith("valid, finish stop")


@pytest.mark.parametrize("golden", ["qwen3-q8_0", "llama3-q4_k_m", "phi3-q8_0", "qwen2-q8_0", "qwen3moe-q8_0",
                                    "mixtral-q8_0"])
def test_verify_full_on_golden_models(golden):
    srv = Server(["--model", str(shared_path("golden", f"{golden}.gguf")), "--name", golden])
    try:
        rc, out, _ = ctl("--url", srv.url, "verify", "--full", golden)
    finally:
        srv.stop()
    assert_full_passes(rc, out)


def test_stress_runs_its_ladder_on_the_demo_model(demo_server):
    rc, out, _ = ctl("--url", demo_server.url, "verify", "--stress", "demo")
    checks = outcomes(out)
    assert checks["tool-prefill"]["status"] == "PASS" and "prompt tokens prefilled" in checks["tool-prefill"]["figures"]
    # the demo model writes doc prose, it cannot recall a number: the ladder reports every rung
    assert checks["needle-ladder"]["figures"].count(" tok ") == 4


def test_bench_prints_a_table_and_json_and_writes_the_chart(demo_server, tmp_path):
    chart = tmp_path / "bench.png"
    rc, out, err = ctl("--url", demo_server.url, "bench", "--streams", "2", "--prompt-tokens", "32",
                       "--gen-tokens", "4", "--chart", str(chart), "demo")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["streams", "ok", "prompt", "gen"] and lines[1].split()[:2] == ["1", "1"]
    assert lines[2].split()[:2] == ["2", "2"]
    result = json.loads(lines[-1])
    assert [r["streams"] for r in result["rows"]] == [1, 2] and all(r["tg_tps"] > 0 for r in result["rows"])
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_record_appends_the_measured_rows_to_the_family_catalog(demo_server, tmp_path, monkeypatch):
    from pantheon.ctl import catalog

    shutil.copytree(catalog.CATALOG_DIR, tmp_path / "catalog")
    load = catalog.load
    monkeypatch.setattr(catalog, "load", lambda: load(tmp_path / "catalog"))
    rc, out, err = ctl("--url", demo_server.url, "bench", "--streams", "1", "--prompt-tokens", "16",
                       "--gen-tokens", "2", "--chart", str(tmp_path / "c.png"), "--record", "demo")
    assert rc == 0, err
    assert f"recorded 1 rows in {tmp_path / 'catalog' / 'llama.toml'}" in out
    rows = [r for r in load(tmp_path / "catalog")["llama"].measured if r["model"] == "demo"]
    assert len(rows) == 1 and rows[0]["streams"] == 1 and rows[0]["tg_tps"] > 0


def verify_against(fault, mode):
    """pantheon-ctl verify `mode` against a Double with `fault` (None: a server doing it right)."""
    double = Double(fault)
    try:
        return ctl("--url", double.url, "verify", mode, "m")
    finally:
        double.close()


def test_every_check_can_pass_against_a_server_doing_it_right():
    rc, out, _ = verify_against(None, "--full")
    checks = assert_full_passes(rc, out)
    assert all(c["status"] == "PASS" for c in checks.values())
    assert "a repeat without a session id: 136 of 137 cached" in checks["cache-reuse"]["figures"]


def test_each_check_has_a_fault_it_catches():
    assert set(CAUGHT_BY) | {"lose_needle", "tool_prefill_fails"} == set(FAULTS)
    assert {n for names, _ in CAUGHT_BY.values() for n in names} == set(FULL)


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_a_broken_server_fails_the_right_check(fault):
    rc, out, _ = verify_against(fault, "--full")
    checks, (failing, phrase) = outcomes(out), CAUGHT_BY[fault]
    assert rc == 3 and [n for n, c in checks.items() if c["status"] != "PASS"] == failing, out
    assert phrase in checks[failing[0]]["figures"], checks[failing[0]]
    assert f"FAIL: {len(FULL) - len(failing)} passed, {len(failing)} failed" in out


@pytest.mark.parametrize("fault, check", [("lose_needle", "needle-ladder"), ("tool_prefill_fails", "tool-prefill")])
def test_a_broken_server_fails_the_right_stress_check(fault, check):
    rc, out, _ = verify_against(fault, "--stress")
    checks = outcomes(out)
    assert rc == 3 and [n for n, c in checks.items() if c["status"] != "PASS"] == [check], out


def test_the_needle_ladder_passes_when_the_needle_comes_back():
    rc, out, _ = verify_against(None, "--stress")
    assert outcomes(out)["needle-ladder"]["status"] == "PASS"
    assert outcomes(out)["needle-ladder"]["figures"].count("found") == 4
