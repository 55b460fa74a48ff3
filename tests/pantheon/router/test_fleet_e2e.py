"""Acceptance of `pantheon router`: three pantheon-serve instances (A twice, B once) behind HAProxy on loopback.

The tests run in file order and share one fleet: the later ones kill, drain and replace instances.
"""

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.pantheon.router.fleet_kit import Router, address_of, instance, require_haproxy
from tests.workers.chaos_kit import counting_model

openai = pytest.importorskip("openai")

HEARTBEAT_S, EVICT_S = 0.5, 2.0
TOKEN = "fleet-token-1"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    require_haproxy()
    return counting_model(tmp_path_factory)


@pytest.fixture(scope="module")
def fleet(model):
    router = Router(["--heartbeat", str(HEARTBEAT_S), "--evict-after", str(EVICT_S), "--registry-token", TOKEN])
    env = {"PANTHEON_REGISTRY_TOKEN": TOKEN}
    servers = {}
    try:
        servers["a1"] = instance(model, "A", router.url, "cpu0", env)
        servers["a2"] = instance(model, "A", router.url, "cpu1", env)
        servers["b"] = instance(model, "B", router.url, "cpu0", env)
        router.await_fleet(lambda f: len(f["instances"]) == 3, token=TOKEN)
        yield router, servers
    finally:
        for s in servers.values():
            s.kill_tree()
        assert router.stop() == 0, router.log()


def fleet_view(router):
    return router.fleet(TOKEN)


def complete(router, model, start, n, session=None, timeout=60):
    headers = {"X-Session-Id": session} if session else {}
    status, body, hdrs = router.request("POST", "/v1/completions", {
        "model": model, "prompt": [start], "max_tokens": n, "temperature": 0}, headers=headers, timeout=timeout)
    assert status == 200, body
    return json.loads(body), hdrs


def test_registry_routes_need_the_token(fleet):
    router, _ = fleet
    status, body, _ = router.request("GET", "/registry/fleet")
    assert status == 401, body
    status, body, _ = router.request("POST", "/registry/register", {"instance": "x", "models": ["A"],
                                                                   "address": "127.0.0.1:1"},
                                     headers={"Authorization": "Bearer wrong"})
    assert status == 401, body
    status, body, _ = router.request("POST", "/registry/register", b"{not json",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 400 and b"not JSON" in body


def test_models_are_listed_once_across_the_fleet(fleet):
    router, _ = fleet
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    ids = [m.id for m in client.models.list().data]
    assert ids == ["A", "B"]


def test_each_model_reaches_its_own_instances(fleet):
    router, servers = fleet
    reply, headers = complete(router, "B", 100, 4)
    assert reply["choices"][0]["text"] and reply["model"] == "B"
    assert router.instance_of(headers, fleet_view(router)) == address_of(servers["b"])
    status, body, _ = router.request("POST", "/v1/completions", {"model": "C", "prompt": [1]})
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"


def test_concurrent_requests_split_across_the_replicas(fleet):
    router, servers = fleet
    view = fleet_view(router)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: complete(router, "A", 10 + i, 48), range(8)))
    where = [router.instance_of(h, view) for _, h in answers]
    counts = {a: where.count(a) for a in set(where)}
    print(f"8 concurrent requests for A by instance: {counts}")
    assert set(counts) == {address_of(servers["a1"]), address_of(servers["a2"])}, counts
    assert min(counts.values()) >= 2, counts


def test_a_session_stays_on_one_instance_and_reuses_its_cache(fleet):
    router, servers = fleet
    view, homes = fleet_view(router), set()
    for s in range(4):
        prompt, cached, where = list(range(200 + 40 * s, 210 + 40 * s)), [], set()
        for _turn in range(3):
            status, body, headers = router.request("POST", "/v1/completions", {
                "model": "A", "prompt": prompt, "max_tokens": 4, "temperature": 0},
                headers={"X-Session-Id": f"session-{s}"})
            assert status == 200, body
            reply = json.loads(body)
            cached.append(reply["usage"]["prompt_tokens_details"]["cached_tokens"])
            where.add(router.instance_of(headers, view))
            prompt = prompt + [prompt[-1] + 1 + i for i in range(4)] + [7, 8]
        assert len(where) == 1, f"session-{s} moved: {where}"
        print(f"session-{s} on {sorted(where)[0]}: cached_tokens by turn {cached}")
        assert cached[0] == 0 and cached[1] > 0 and cached[2] > cached[1], cached
        homes |= where
    assert len(homes) == 2, "four sessions should not all land on one instance under leastconn"


def test_a_stored_response_is_continued_on_the_instance_that_stored_it(fleet):
    """Each instance keeps its own stored responses; the router pins a response's id to its instance, so a
    chain of previous_response_id continuations never lands where it would be a 404 (leastconn alone would
    alternate between A's two replicas)."""
    router, _ = fleet
    view, where, previous = fleet_view(router), set(), None
    for turn in range(5):
        body = {"model": "A", "input": f"Turn {turn}.", "max_output_tokens": 2, "temperature": 0}
        status, raw, headers = router.request("POST", "/v1/responses", dict(
            body, **({"previous_response_id": previous} if previous else {})))
        assert status == 200, raw
        previous = json.loads(raw)["id"]
        where.add(router.instance_of(headers, view))
    assert len(where) == 1, where


def test_a_stored_response_is_read_and_deleted_through_the_router(fleet):
    """GET, input_items, cancel and DELETE of /v1/responses/{id} carry no `model`: the id in the path finds
    the model backend and the instance that stored it, whichever of A's two replicas that was."""
    router, _ = fleet
    view, homes = fleet_view(router), {}
    for turn in range(4):
        status, raw, headers = router.request("POST", "/v1/responses", {
            "model": "A", "input": f"Note {turn}.", "max_output_tokens": 2, "temperature": 0})
        assert status == 200, raw
        homes[json.loads(raw)["id"]] = router.instance_of(headers, view)
    assert len(set(homes.values())) == 2, "leastconn should spread four sequential answers over both replicas"
    for rid, home in homes.items():
        for path in (f"/v1/responses/{rid}", f"/responses/{rid}", f"/v1/responses/{rid}/input_items"):
            status, raw, headers = router.request("GET", path)
            assert status == 200, (path, raw)
            assert router.instance_of(headers, view) == home
        assert json.loads(raw)["data"][0]["content"][0]["text"].startswith("Note")
        status, raw, _ = router.request("POST", f"/v1/responses/{rid}/cancel")
        assert (status, json.loads(raw)["error"]["code"]) == (400, "not_background")
    gone = next(iter(homes))
    status, raw, _ = router.request("DELETE", f"/v1/responses/{gone}")
    assert (status, json.loads(raw)["deleted"]) == (200, True)
    assert router.request("GET", f"/v1/responses/{gone}")[0] == 404
    status, raw, _ = router.request("GET", "/v1/responses/resp_never_made")
    assert (status, json.loads(raw)["error"]["code"]) == (404, "response_not_found")


def test_the_openai_client_streams_through_the_router(fleet):
    router, _ = fleet
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    pieces = [c.choices[0].text for c in client.completions.create(model="A", prompt=[500], max_tokens=6,
                                                                    temperature=0, stream=True)]
    whole = client.completions.create(model="A", prompt=[500], max_tokens=6, temperature=0)
    assert "".join(pieces) == whole.choices[0].text and len(pieces) >= 6
    chat = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="B", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True) if c.choices]
    assert len(chat) >= 2


def _open_stream(router, model, start, n, session):
    """A streaming request read through its first events: (response, instance)."""
    import http.client

    host, port = router.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({"model": model, "prompt": [start], "max_tokens": n,
                                                        "temperature": 0, "stream": True}),
                 {"Content-Type": "application/json", "X-Session-Id": session})
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.readline()
    assert first.startswith(b"data:")
    return resp, router.instance_of(dict(resp.getheaders()), fleet_view(router))


def _read_events(resp):
    """(data lines, 'done' when the last is [DONE], else 'truncated')."""
    events = [line[5:].strip() for line in resp if line.startswith(b"data:")]
    return events, "done" if events and events[-1] == b"[DONE]" else "truncated"


def test_a_killed_instance_ends_its_streams_with_an_error_and_the_survivor_serves(fleet):
    router, servers = fleet
    victim = next(k for k in ("a1", "a2") if _open_probe(router, k, servers))
    raw, where = _open_stream(router, "A", 1000, 3000, "doomed")  # the bytes the client receives
    assert where == address_of(servers[victim])
    reader = ThreadPoolExecutor(1).submit(_read_events, raw)  # read as it comes: never a full buffer
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    sdk = client.completions.with_raw_response.create(model="A", prompt=[1001], max_tokens=3000, temperature=0,
                                                      stream=True, extra_headers={"X-Session-Id": "doomed"})
    assert router.instance_of(dict(sdk.headers), fleet_view(router)) == address_of(servers[victim])
    chunks = iter(sdk.parse())
    assert next(chunks).choices[0].text
    servers[victim].kill_tree()  # SIGKILL to the whole instance, mid-stream
    killed = time.monotonic()
    _assert_ends_with_the_lost_event(*reader.result(timeout=30))
    with pytest.raises(openai.APIError) as caught:  # the SDK raises; it never returns a short answer as done
        for chunk in chunks:
            assert chunk.choices[0].finish_reason is None
    assert not isinstance(caught.value, openai.APIConnectionError), caught.value
    assert caught.value.body["code"] == "instance_lost" and "retry" in caught.value.message
    survivor = address_of(servers["a2" if victim == "a1" else "a1"])
    # at once, before eviction: the sticky session's server is dead; HAProxy retries on the survivor
    early = ThreadPoolExecutor(1).submit(complete, router, "A", 30, 3, "doomed")
    router.await_fleet(lambda f: address_of(servers[victim]) not in [i["instance"] for i in f["instances"]],
                       timeout=EVICT_S + 5, token=TOKEN)
    # the window: the last heartbeat came at most one interval before the kill; 2 s of slack for a busy machine
    evicted_after = time.monotonic() - killed
    print(f"evicted {evicted_after:.2f} s after the kill (heartbeat {HEARTBEAT_S} s, evict after {EVICT_S} s)")
    assert evicted_after <= EVICT_S + HEARTBEAT_S + 2.0, router.log()
    assert router.instance_of(early.result()[1], fleet_view(router)) == survivor
    view = fleet_view(router)
    assert not any(k.endswith("@" + address_of(servers[victim])) for k in view["servers"])
    for i in range(4):
        _, headers = complete(router, "A", 31 + i, 3, session="doomed" if i % 2 else None)
        assert router.instance_of(headers, view) == survivor
    del servers[victim]


def _assert_ends_with_the_lost_event(events, ending):
    """The stream the killed instance was sending: its tokens, then the router's error event, then [DONE]."""
    assert ending == "done", events[-3:]
    error = json.loads(events[-2])["error"]
    assert (error["type"], error["code"]) == ("server_error", "instance_lost"), error
    tokens = [json.loads(e)["choices"][0] for e in events[:-2]]
    assert len(tokens) >= 1 and all(t["finish_reason"] is None for t in tokens)


def _open_probe(router, key, servers):
    """True when a fresh session lands on instance `key` (the victim is whichever A the proxy picks)."""
    _, headers = complete(router, "A", 3, 1, session="doomed")
    return router.instance_of(headers, fleet_view(router)) == address_of(servers[key])


def test_a_new_instance_joins_and_a_draining_one_finishes_its_streams(fleet, model):
    router, servers = fleet
    old_key = next(k for k in ("a1", "a2") if k in servers)
    servers["a3"] = instance(model, "A", router.url, "cpu1", {"PANTHEON_REGISTRY_TOKEN": TOKEN})
    router.await_fleet(lambda f: len(f["models"]["A"]) == 2, token=TOKEN)
    resp, where = _open_stream(router, "A", 2000, 400, "drain-me")
    old = address_of(servers[old_key])
    if where != old:
        resp.close()
        old_key, old = "a3", address_of(servers["a3"])
        resp, where = _open_stream(router, "A", 2000, 400, "drain-me-too")
        assert where == old
    servers[old_key].proc.send_signal(signal.SIGTERM)  # the instance deregisters, then drains
    router.await_fleet(lambda f: any(i["instance"] == old and i["state"] == "draining" for i in f["instances"]),
                       timeout=10, token=TOKEN)
    other = address_of(servers["a3" if old_key != "a3" else next(k for k in ("a1", "a2") if k in servers)])
    for i in range(3):
        _, headers = complete(router, "A", 60 + i, 2, session="drain-me")
        assert router.instance_of(headers, fleet_view(router)) == other
    events, ending = _read_events(resp)
    assert ending == "done", ending
    odd = [e for e in events[:-1] if "choices" not in json.loads(e)]  # an error event: what ended it early
    assert not odd, (odd, servers[old_key].log()[-3000:], router.log()[-3000:])
    texts = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
    assert len("".join(texts)) > 0 and json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    print(f"the draining instance finished its open stream: {len(texts)} events, [DONE]; 3 new requests went "
          f"to {other}")
    assert servers[old_key].proc.wait(30) == 0
    router.await_fleet(lambda f: not any(k.endswith("@" + old) for k in f["servers"]), timeout=10, token=TOKEN)
