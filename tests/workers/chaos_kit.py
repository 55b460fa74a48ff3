"""Tools of the crash tests: a counting-model server, an SSE client that audits endings, process probes."""

import http.client
import json
import time
from dataclasses import dataclass, field

import psutil

import pantheon
from tests.conftest import shared_path
from tests.counting_model import build, expected_ids
from tests.workers.serving import Server


def counting_model(tmp_path_factory):
    return str(build(tmp_path_factory.mktemp("counting") / "counting.gguf", shared_path("golden", "llama-f32.gguf")))


def replicated_server(model, env, dies=2, fronts=2, max_concurrent=4):
    """`count` on `dies` CPU dies (one replica each), with the chaos hooks on."""
    args = ["--cpu-dies", str(dies), "--http-workers", str(fronts)]
    for d in range(dies):
        args += ["--model", model, "--name", "count", "--dies", f"cpu{d}", "--max-concurrent", str(max_concurrent)]
    return Server(args, env={"PANTHEON_CHAOS_HOOKS": "1", **env})


@dataclass
class Outcome:
    """How one streamed request ended, as the client saw it."""

    start: int
    n: int
    status: int = 0
    replica: str = ""
    text: str = ""  # every choice's text, in arrival order
    texts: dict = field(default_factory=dict)  # choice index -> its text
    finishes: list = field(default_factory=list)  # finish_reason values seen
    errors: list = field(default_factory=list)  # error events (or the error body of a non-200 answer)
    dones: int = 0  # "data: [DONE]" lines
    after_done: int = 0  # events after [DONE]
    broken: str = ""  # the connection ended without a proper end: why
    began: float = 0.0
    ended: float = 0.0

    def endings(self):
        """Terminal events: a finish_reason, an error event, or an error answer."""
        return len([f for f in self.finishes if f]) + len(self.errors)

    def ended_once(self):
        if self.status != 200:
            return self.endings() == 1 and not self.broken
        return self.endings() == 1 and self.dones == 1 and not self.after_done and not self.broken


def _event(out, data):
    if out.dones:
        out.after_done += 1
    if data == "[DONE]":
        out.dones += 1
        return
    body = json.loads(data)
    if "error" in body:
        out.errors.append(body["error"])
        return
    choice = body["choices"][0]
    out.text += choice.get("text") or ""
    out.texts[choice.get("index", 0)] = out.texts.get(choice.get("index", 0), "") + (choice.get("text") or "")
    out.finishes.append(choice.get("finish_reason"))


def stream(base_url, start, n, timeout=120, on_open=None, extra=None):
    """POST a streaming completion of prompt [start] (more body fields in `extra`); read it to the end and
    return its Outcome."""
    out = Outcome(start, n, began=time.monotonic())
    conn = http.client.HTTPConnection(base_url.split("//")[1], timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps({
            "model": "count", "prompt": [start], "max_tokens": n, "temperature": 0, "stream": True,
            **(extra or {})}),
            {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out.status, out.replica = resp.status, resp.getheader("X-Pantheon-Replica") or ""
        if on_open is not None:
            on_open(out)
        if resp.status != 200:
            out.errors.append(json.loads(resp.read()).get("error"))
            return out
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                _event(out, line[6:].strip().decode())
    except (OSError, http.client.HTTPException, ValueError) as e:
        out.broken = f"{type(e).__name__}: {e}"
    finally:
        out.ended = time.monotonic()
        conn.close()
    if out.status == 200 and not out.dones and not out.broken:
        out.broken = "the stream ended without [DONE]"
    return out


class Oracle:
    """The text the counting model must produce for prompt [start], n tokens."""

    def __init__(self, model):
        self.tok = pantheon.open_tokenizer(model)

    def text(self, start, n):
        return self.tok.decode(expected_ids(start, n))

    def first_difference(self, out):
        want = self.text(out.start, out.n)
        at = next((i for i, (a, b) in enumerate(zip(out.text, want)) if a != b), min(len(out.text), len(want)))
        return f"prompt [{out.start}] n={out.n}: got {out.text[at:at + 30]!r} at char {at}, want {want[at:at + 30]!r}"


def dies(server):
    status, body = server.get("/admin/dies")
    assert status == 200, body
    return {d["name"]: d for d in json.loads(body)["dies"]}


def wait_for(predicate, timeout, step=0.05):
    """Poll until predicate() is truthy; returns its last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(step)
        value = predicate()
    return value


def all_up(server):
    state = dies(server)
    return state if all(d["state"] == "up" and d["pid"] for d in state.values()) else None


def fronts(server, timeout=60.0):
    """Front pids: children of the supervisor that are not die workers.

    Read while every die is up and its worker pid is the same before and after listing the children,
    so a worker restarting in between (a chaos strike) is never taken for a front."""
    def settled():
        before = all_up(server)
        children = server.children()
        after = all_up(server)
        same = before and after and {d["pid"] for d in before.values()} == {d["pid"] for d in after.values()}
        return same and sorted(p for p in children if p not in {d["pid"] for d in after.values()})
    found = wait_for(settled, timeout)
    assert found, f"no moment with every die up and a stable worker set: {dies(server)}"
    return found


def tree(pid):
    """pid and every descendant that is still there."""
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def zombies(pid):
    out = []
    for p in tree(pid)[1:]:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def footprint(pid):
    """(open file descriptors, resident bytes) of one process."""
    p = psutil.Process(pid)
    return p.num_fds(), p.memory_info().rss


def alive(pid):
    """Running or stopped, not a zombie and not gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(pids, timeout):
    """True once none of `pids` is alive (a zombie counts as gone: reaping it is its parent's job)."""
    return wait_for(lambda: not any(alive(p) for p in pids), timeout)
