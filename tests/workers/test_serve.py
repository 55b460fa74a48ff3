"""End to end: a real pantheon-serve tree (supervisor, 2 fronts, 2 CPU dies) driven over HTTP."""

import glob
import http.client
import json
import math
import os
import signal
import tempfile
import threading
import time

import psutil
import pytest

import pantheon
from pantheon.engine.scheduler import Engine, EngineConfig, Request
from pantheon.engine.sampler import SamplingParams
from pantheon.text import dry_breakers
from tests.conftest import shared_path
from tests.workers.chaos_kit import dies, fronts
from tests.workers.serving import Server
from workers import response_dir

pytestmark = pytest.mark.usefixtures("compiled_kernels")  # its servers run models under timeouts

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def golden():
    return {name: str(shared_path("golden", f"{name}.gguf")) for name in ("qwen2-q8_0", "llama-q8_0", "llama-q4_0")}


@pytest.fixture(scope="module")
def server(golden):
    srv = Server(["--cpu-dies", "2", "--http-workers", "2", "--sse-keepalive", "1",
                  "--model", golden["qwen2-q8_0"], "--name", "qwen", "--dies", "cpu0", "--ctx-cap", "64",
                  "--model", golden["llama-q8_0"], "--name", "llama", "--dies", "cpu1", "--max-concurrent", "1",
                  "--model", golden["llama-q4_0"], "--name", "rep", "--dies", "cpu0",
                  "--model", golden["llama-q4_0"], "--name", "rep", "--dies", "cpu1"])
    yield srv
    assert srv.stop() == 0, "".join(srv.lines)
    assert not store_dirs(srv), "the Responses store's directory outlived the server"


def store_dirs(server):
    return glob.glob(os.path.join(tempfile.gettempdir(), f"{response_dir.PREFIX}{server.proc.pid}-*"))


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def engine_greedy(path, prompt_ids, n, params=SamplingParams(temperature=0.0)):
    """What the model file itself generates (greedily, unless `params` say otherwise), computed in this process."""
    engine = Engine(pantheon.open_model(path, threads=1), EngineConfig(n_ctx=128))
    engine.add(Request(1, tuple(prompt_ids), n, params))
    out = []
    while engine.has_work:
        out += [e.token for e in engine.step() if hasattr(e, "token")]
    return out


@pytest.mark.parametrize("sampling", [
    dict(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=2.0, typical_p=0.95, xtc_probability=0.5,
         xtc_threshold=0.05, dynatemp_range=0.5, dynatemp_exponent=1.5),
    dict(temperature=1.0, mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2),
    dict(temperature=0.9, mirostat=1, mirostat_tau=3.0, mirostat_eta=0.3)])
def test_llama_cpps_optional_samplers_cross_the_rings(server, golden, sampling):
    """A seeded draw through the rings is the draw of the same settings in this process: every field arrived."""
    prompt, params = [1, 213, 540, 867, 1194], dict(sampling, seed=7, logit_bias={2: -100.0})
    status, body, _ = server.request("POST", "/v1/completions", dict(
        sampling, model="llama", prompt=prompt, max_tokens=12, seed=7, logit_bias={"2": -100}))
    assert status == 200, body
    want = engine_greedy(golden["llama-q8_0"], prompt, 12, SamplingParams(**params))
    assert json.loads(body)["choices"][0]["text"] == pantheon.open_tokenizer(golden["llama-q8_0"]).decode(want)


def test_min_keep_crosses_the_rings(server, golden):
    """top_p 0.01 and min_p 1 keep the best token alone; min_keep 5 keeps five, which a temperature of 1e4 makes
    near-uniform. Through the rings as in this process, and not what the draws would be without min_keep."""
    prompt, sampling = [1, 213, 540, 867, 1194], dict(temperature=1e4, top_k=0, top_p=0.01, min_p=1.0, min_keep=5)
    status, body, _ = server.request("POST", "/v1/completions", dict(
        sampling, model="llama", prompt=prompt, max_tokens=12, seed=7))
    assert status == 200, body
    want = engine_greedy(golden["llama-q8_0"], prompt, 12, SamplingParams(**sampling, seed=7))
    alone = engine_greedy(golden["llama-q8_0"], prompt, 12, SamplingParams(**dict(sampling, min_keep=0), seed=7))
    assert want != alone
    assert json.loads(body)["choices"][0]["text"] == pantheon.open_tokenizer(golden["llama-q8_0"]).decode(want)


def test_min_tokens_crosses_the_rings(server):
    """The end token made the certain pick by a bias ends the answer at once; min_tokens 3 holds it off."""
    body = {"model": "llama", "prompt": [1, 213, 540], "max_tokens": 8, "temperature": 0, "logit_bias": {"2": 1000}}
    for min_tokens in (0, 3):
        status, raw, _ = server.request("POST", "/v1/completions", dict(body, min_tokens=min_tokens))
        assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == min_tokens, raw


@pytest.mark.parametrize("breaking", [False, True])
def test_dry_and_its_breakers_cross_the_rings(server, golden, breaking):
    """Token 1194, made the certain pick by a bias, would continue the prompt's repeat; DRY forbids it unless a breaker
    (the text of the prompt's last token, sent as text, crossing as the token sequences the front found) ends
    the repeat. Through the rings as in this process, where the breakers are found from the same text."""
    tok = pantheon.open_tokenizer(golden["llama-q8_0"])
    prompt, texts = [1, 213, 540, 867, 1194, 213, 540, 867], [tok.decode([867])] if breaking else ["\u2603"]
    sampling = dict(temperature=0.7, dry_multiplier=1e4, dry_base=1.5, dry_allowed_length=1, dry_penalty_last_n=64)
    status, body, _ = server.request("POST", "/v1/completions", dict(
        sampling, model="llama", prompt=prompt, max_tokens=1, seed=7, logit_bias={"2": -100, "1194": 1000},
        dry_sequence_breakers=texts))
    assert status == 200, body
    params = dict(sampling, seed=7, logit_bias={2: -100.0, 1194: 1000.0},
                  dry_breakers=dry_breakers.breakers(tok, texts))
    want = engine_greedy(golden["llama-q8_0"], prompt, 1, SamplingParams(**params))
    got = json.loads(body)["choices"][0]["text"]
    assert got == tok.decode(want) and (want == [1194]) == breaking


def test_models_list(client):
    names = sorted(m.id for m in client.models.list().data)
    assert names == ["llama", "qwen", "rep"]


@pytest.mark.parametrize("name,file", [("qwen", "qwen2-q8_0"), ("llama", "llama-q8_0")])
def test_each_request_reaches_the_model_it_names(server, golden, name, file):
    status, body, headers = server.request("POST", "/v1/completions", {
        "model": name, "prompt": [1, 213, 540, 867, 1194], "max_tokens": 6, "temperature": 0})
    assert status == 200, body
    reply = json.loads(body)
    assert reply["model"] == name
    want = engine_greedy(golden[file], [1, 213, 540, 867, 1194], 6)
    text = pantheon.open_tokenizer(golden[file]).decode(want)
    assert reply["choices"][0]["text"] == text
    assert reply["usage"]["completion_tokens"] == len(want)
    assert headers["X-Pantheon-Replica"] == {"qwen": "cpu0", "llama": "cpu1"}[name]


def test_openai_client_chat_and_completions(client):
    chat = client.chat.completions.create(model="rep", messages=[{"role": "user", "content": "Hi"}], max_tokens=5)
    assert chat.choices[0].finish_reason in ("stop", "length") and chat.usage.completion_tokens <= 5
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="rep", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True) if c.choices]
    assert len(pieces) >= 2
    comp = client.completions.create(model="rep", prompt="Hello", max_tokens=4, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="rep", prompt="Hello", max_tokens=4, temperature=0, stream=True))
    assert streamed == comp.choices[0].text


def _stream(server, body, headers, out, key):
    conn = http.client.HTTPConnection(server.url.split("//")[1], timeout=60)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    out[key] = {"replica": resp.getheader("X-Pantheon-Replica"), "start": time.monotonic(), "status": resp.status}
    out[key]["body"] = resp.read()
    out[key]["end"] = time.monotonic()
    conn.close()


def concurrent(server, n, headers=None, max_tokens=40):
    out = {}
    body = {"model": "rep", "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
            "logit_bias": {"2": -100}}
    threads = [threading.Thread(target=_stream, args=(server, body, headers or {}, out, i)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in out.values():
        assert o["status"] == 200 and o["body"].rstrip().endswith(b"data: [DONE]"), o
    return out


def test_two_concurrent_requests_run_on_both_replicas(server):
    out = concurrent(server, 2, max_tokens=600)
    assert {o["replica"] for o in out.values()} == {"cpu0", "cpu1"}
    assert max(o["start"] for o in out.values()) < min(o["end"] for o in out.values()), "they did not overlap"


def test_session_affinity_and_cached_tokens(server):
    msgs = [{"role": "user", "content": "Tell me a story about a cat"}]
    seen = set()
    for turn in range(3):
        status, body, headers = server.request("POST", "/v1/chat/completions", {
            "model": "rep", "messages": msgs, "max_tokens": 4, "temperature": 0}, headers={"X-Session-Id": "s-42"})
        assert status == 200, body
        reply = json.loads(body)
        assert reply["choices"][0]["finish_reason"] in ("stop", "length") and reply["usage"]["completion_tokens"] <= 4
        seen.add(headers["X-Pantheon-Replica"])
        if turn:
            assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        msgs += [reply["choices"][0]["message"], {"role": "user", "content": f"and then {turn}"}]
    assert len(seen) == 1
    same = concurrent(server, 2, {"X-Session-Id": "s-43"}, max_tokens=600)
    assert len({o["replica"] for o in same.values()}) == 1


def test_a_prompt_prefix_without_a_session_returns_to_the_replica_that_cached_it(server):
    prompt = ("Affinity on the prompt prefix sends a request without a session to the replica that last "
              "ran the same leading tokens, because that replica still holds their keys and values")
    body = {"model": "rep", "prompt": prompt, "max_tokens": 3, "temperature": 0}
    out = {}
    long_run = threading.Thread(target=_stream, args=(server, {"model": "rep", "prompt": "Once upon a time",
                                "max_tokens": 600, "stream": True, "logit_bias": {"2": -100}}, {}, out, "busy"))
    long_run.start()
    while "busy" not in out:
        time.sleep(0.01)
    status, raw, headers = server.request("POST", "/v1/completions", body)
    assert status == 200, raw
    home = headers["X-Pantheon-Replica"]
    assert home != out["busy"]["replica"]  # the only idle replica took it
    first = json.loads(raw)
    long_run.join()
    for _ in range(2):  # both replicas idle: least-busy alone would take cpu0 whatever home is
        status, raw, headers = server.request("POST", "/v1/completions", body)
        reply = json.loads(raw)
        assert status == 200 and headers["X-Pantheon-Replica"] == home
        assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1
        assert reply["choices"][0]["text"] == first["choices"][0]["text"]


def test_ctx_cap_refuses_long_prompt(server):
    status, body, _ = server.request("POST", "/v1/completions", {"model": "qwen", "prompt": list(range(5, 90))})
    assert status == 400 and json.loads(body)["error"]["code"] == "context_over_budget"


def test_max_concurrent_queues_then_429(server):
    results = {}

    def run(i):
        results[i] = server.request("POST", "/v1/completions", {
            "model": "llama", "prompt": "x", "max_tokens": 1500, "logit_bias": {"2": -100}})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.15)
    for t in threads:
        t.join()
    codes = sorted(r[0] for r in results.values())
    assert codes.count(200) == 2 and codes.count(429) == 2, codes
    refused = [r for r in results.values() if r[0] == 429][0]
    assert int(refused[2]["Retry-After"]) >= 1


def test_a_silent_stream_gets_keepalive_comments_until_its_tokens(server):
    """--sse-keepalive 1: while llama's die is frozen (2.5 s, well under the 10 s hang timeout) its stream
    sends comment lines, then its tokens."""
    pid = dies(server)["cpu1"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    thaw = threading.Timer(2.5, os.kill, (pid, signal.SIGCONT))
    thaw.start()
    try:
        sock, seen = server.open_stream({"model": "llama", "prompt": "x", "max_tokens": 2})
        sock.close()
    finally:
        thaw.join()
        os.kill(pid, signal.SIGCONT)
    assert seen.count(b": waiting ") >= 2 and seen.index(b": waiting") < seen.index(b"data:"), seen


def test_client_disconnect_frees_the_slot(server):
    t0 = time.monotonic()
    server.request("POST", "/v1/completions", {"model": "llama", "prompt": "x", "max_tokens": 300,
                                               "logit_bias": {"2": -100}})
    full_run_s = (time.monotonic() - t0) * 1900 / 300
    sock, _ = server.open_stream({"model": "llama", "prompt": "x", "max_tokens": 1900, "logit_bias": {"2": -100}})
    sock.close()
    started = time.monotonic()
    busy = b'pantheon_in_flight{die="cpu1"} 1'
    while busy in server.get("/metrics")[1]:
        assert time.monotonic() - started < full_run_s / 2, "the generation kept running after the client left"
        time.sleep(0.02)
    status, _, _ = server.request("POST", "/v1/completions", {"model": "llama", "prompt": "x", "max_tokens": 2})
    assert status == 200


@pytest.mark.parametrize("body,status,param", [
    ({"model": "nope", "prompt": "x"}, 404, None),
    (b"{not json", 400, None),
    ({"model": "qwen", "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
    ({"model": "qwen", "prompt": "x", "bogus": 1}, 400, "bogus"),
])
def test_bad_requests(server, body, status, param):
    got, raw, _ = server.request("POST", "/v1/completions", body)
    assert got == status
    err = json.loads(raw)["error"]
    assert err["message"] and (param is None or err["param"] == param)


def test_health_and_metrics(server):
    status, body = server.get("/health")
    health = json.loads(body)
    assert status == 200 and set(health["models"]) == {"qwen", "llama", "rep"}
    assert health["dies"] == {"cpu0": "up", "cpu1": "up"}
    _, metrics = server.get("/metrics")
    assert b"pantheon_requests_total" in metrics and b"pantheon_completion_tokens_total" in metrics


def test_bundled_demo_model_is_served_without_a_model_flag():
    srv = Server(["--http-workers", "1"])
    try:
        status, body, _ = srv.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "The meaning of"}], "max_tokens": 16, "seed": 1})
        reply = json.loads(body)
        assert status == 200 and reply["model"] == "pantheon-demo.gguf"
        assert len(reply["choices"][0]["message"]["content"].split()) >= 3
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_through_the_rings(client, stream):
    full = client.completions.create(model="rep", prompt="Once upon a time", max_tokens=24, temperature=0,
                                     logit_bias={"2": -100})
    text = full.choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    kw = dict(model="rep", prompt="Once upon a time", max_tokens=24, temperature=0, logit_bias={"2": -100},
              stop=[stop])
    if stream:
        chunks = list(client.completions.create(stream=True, **kw))
        got, reason = "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason
    else:
        out = client.completions.create(**kw)
        got, reason = out.choices[0].text, out.choices[0].finish_reason
    assert (got, reason) == (text[:text.find(stop)], "stop")


def _connection_to(server, front, others):
    """A keep-alive connection that `front` accepted: the other fronts are stopped while it is made."""
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    try:
        conn = http.client.HTTPConnection(server.url.split("//")[1], timeout=60)
        _ask(conn, "GET", "/health")
        port = conn.sock.getsockname()[1]
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)
    held = [c for c in psutil.Process(front).net_connections("tcp") if c.raddr and c.raddr.port == port]
    assert held, f"front {front} does not hold the connection"
    return conn


def _ask(conn, method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"null")


def test_stored_responses_are_shared_by_every_front(server):
    """A response stored through one front is continued, read and deleted through the other."""
    a, b = fronts(server)
    to_a, to_b = _connection_to(server, a, [b]), _connection_to(server, b, [a])
    assert len(store_dirs(server)) == 1
    ask = {"model": "llama", "max_output_tokens": 3, "temperature": 0}
    status, first = _ask(to_a, "POST", "/v1/responses", dict(ask, input="Once upon a time"))
    assert status == 200 and first["store"] is True, first
    status, second = _ask(to_b, "POST", "/v1/responses", dict(ask, input="The end.", previous_response_id=first["id"]))
    assert status == 200 and second["previous_response_id"] == first["id"], second
    text = first["output"][0]["content"][0]["text"]
    talk = [{"role": "user", "content": "Once upon a time"}, {"role": "assistant", "content": text},
            {"role": "user", "content": "The end."}]
    status, chat = _ask(to_a, "POST", "/v1/chat/completions", {"model": "llama", "max_tokens": 3, "temperature": 0,
                                                                "messages": talk})
    assert second["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]
    assert second["output"][0]["content"][0]["text"] == chat["choices"][0]["message"]["content"]
    assert _ask(to_a, "GET", f"/v1/responses/{second['id']}") == (200, second)
    assert _ask(to_b, "DELETE", f"/v1/responses/{first['id']}")[0] == 200
    assert _ask(to_a, "GET", f"/v1/responses/{first['id']}")[0] == 404
    to_a.close()
    to_b.close()


def test_a_background_response_made_in_one_front_is_polled_and_cancelled_through_the_other(server):
    """The front that generates a background response is not the one the client polls: the store carries the
    answer one way and the cancel the other."""
    a, b = fronts(server)
    to_a, to_b = _connection_to(server, a, [b]), _connection_to(server, b, [a])
    ask = {"model": "llama", "temperature": 0, "background": True, "input": "Once upon a time"}
    status, short = _ask(to_a, "POST", "/v1/responses", dict(ask, max_output_tokens=3))
    assert status == 200 and short["status"] in ("queued", "in_progress"), short
    deadline = time.monotonic() + 30
    while (done := _ask(to_b, "GET", f"/v1/responses/{short['id']}")[1])["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline, done
        time.sleep(0.05)
    status, foreground = _ask(to_b, "POST", "/v1/responses", dict(ask, background=False, max_output_tokens=3))
    assert done["status"] == foreground["status"] and done["output"][0]["content"][0]["text"] == \
        foreground["output"][0]["content"][0]["text"]
    generated, busy = _completion_tokens(server), b'pantheon_in_flight{die="cpu1"} 1'
    status, long = _ask(to_a, "POST", "/v1/responses", dict(ask, max_output_tokens=1900))
    deadline = time.monotonic() + 10
    while busy not in server.get("/metrics")[1]:
        assert time.monotonic() < deadline, "the background generation never started"
        time.sleep(0.01)
    assert _ask(to_b, "POST", f"/v1/responses/{long['id']}/cancel") == (200, dict(long, status="cancelled"))
    while busy in server.get("/metrics")[1]:
        assert time.monotonic() < deadline, "the cancelled background generation kept running"
        time.sleep(0.05)
    time.sleep(0.5)  # a generation that ran to its end is counted by its front just after its die lets it go
    assert _completion_tokens(server) == generated, "the generation ran to its end (only a finished one counts)"
    assert _ask(to_a, "GET", f"/v1/responses/{long['id']}")[1]["status"] == "cancelled"
    to_a.close()
    to_b.close()


def test_a_streamed_background_response_made_in_one_front_is_resumed_through_the_other(server):
    """The stream breaks after a few events in front a; front b resumes it from the last one it had."""
    a, b = fronts(server)
    to_a, to_b = _connection_to(server, a, [b]), _connection_to(server, b, [a])
    ask = {"model": "llama", "temperature": 0, "input": "Once upon a time", "max_output_tokens": 40}
    whole = _ask(to_b, "POST", "/v1/responses", ask)[1]["output"][0]["content"][0]["text"]
    to_a.request("POST", "/v1/responses", json.dumps(dict(ask, background=True, stream=True)),
                 {"Content-Type": "application/json"})
    first = _sse_events(to_a.getresponse(), limit=6)
    to_a.close()  # the client lost its stream
    response_id = first[0]["response"]["id"]
    to_b.request("GET", f"/v1/responses/{response_id}?stream=true&starting_after={first[-1]['sequence_number']}")
    rest = _sse_events(to_b.getresponse())
    assert [e["sequence_number"] for e in first + rest] == list(range(len(first) + len(rest)))
    assert rest[-1]["type"] == "response.incomplete" and rest[-1]["response"]["id"] == response_id
    assert "".join(e["delta"] for e in first + rest if e["type"] == "response.output_text.delta") == whole
    to_b.close()


def test_post_sampling_probs_cross_the_rings(server):
    """The die computes them (the flag rides in the SUBMIT frame): top_k 2's two survivors, renormalized."""
    body = {"model": "llama", "prompt": "Once upon a time", "n_predict": 4, "temperature": 1.0, "top_k": 2,
            "top_p": 1.0, "min_p": 0.0, "seed": 3, "n_probs": 2}
    raw = json.loads(server.request("POST", "/completion", body)[1])["completion_probabilities"]
    post = json.loads(server.request("POST", "/completion", dict(body, post_sampling_probs=True))[1])[
        "completion_probabilities"]
    assert [p["id"] for p in post] == [p["id"] for p in raw]
    for p, r in zip(post, raw):
        total = sum(math.exp(t["logprob"]) for t in r["top_logprobs"])
        assert [t["prob"] for t in p["top_probs"]] == pytest.approx(
            [math.exp(t["logprob"]) / total for t in r["top_logprobs"]], abs=1e-5)


def _sse_events(resp, limit=None):
    assert resp.status == 200, resp.read()
    got = []
    for line in resp:
        if line.startswith(b"data: "):
            got.append(json.loads(line[6:]))
            if len(got) == limit:
                break
    return got


def _completion_tokens(server, model="llama"):
    line = f'pantheon_completion_tokens_total{{model="{model}"}} '.encode()
    return next((float(x[len(line):]) for x in server.get("/metrics")[1].splitlines() if x.startswith(line)), 0.0)
