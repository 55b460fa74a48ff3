"""`pantheon-ctl verify [--full | --stress] MODEL`: checks against a running server, each PASS, FAIL
or SKIP (with the reason) and its figures; the smoke (3 checks) takes seconds, --full adds 7
functional checks, --stress 2 long-context ones."""

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pantheon.ctl import api, hub
from pantheon.errors import GGUFError

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
PROMPT = "Write one sentence about the sea."
CONCURRENCY = 4
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# a schema whose every answer is short: the longest, '{"city": "<24 letters>", "population": 99999999}',
# is 60 characters, so SCHEMA_BUDGET tokens hold it even at one token per character (plus the end token)
CITY, MAX_POPULATION = "^[A-Za-z][A-Za-z .'-]{0,23}$", 99_999_999
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "pattern": CITY},
                                           "population": {"type": "integer", "minimum": 0, "maximum": MAX_POPULATION}},
          "required": ["city", "population"], "additionalProperties": False}
SCHEMA_BUDGET = 96


@dataclass
class Outcome:
    name: str
    status: str
    figures: str
    seconds: float = 0.0


class Target:
    """The server and model under test, and what earlier checks learnt (the greedy reference)."""

    def __init__(self, client, model):
        self.api, self.model = client, model
        self.n_ctx = None
        self.reference = None      # the greedy chat reply every later check compares with

    def chat(self, content=PROMPT, max_tokens=24, **extra):
        return self.api.post("/v1/chat/completions", api.chat(self.model, content, max_tokens, **extra))


def run_checks(checks, target, out):
    """Run each check in order, printing one line per check as it ends; returns the outcomes."""
    outcomes = []
    for check in checks:
        start = time.monotonic()
        try:
            status, figures = check(target)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            status, figures = FAIL, f"unexpected answer: {type(e).__name__}: {e}"
        outcome = Outcome(check.__name__.removeprefix("check_").replace("_", "-"), status, figures,
                          time.monotonic() - start)
        out.write(f"{outcome.status:<4}  {outcome.name:<16} {outcome.seconds:6.1f} s  {outcome.figures}\n")
        out.flush()
        outcomes.append(outcome)
    return outcomes


# ---- the smoke (~10 s)


def check_health(t):
    reply = t.api.get("/health")
    state = (reply.body.get("models", {}).get(t.model) or {}).get("state") if isinstance(reply.body, dict) else None
    if state is None and isinstance(reply.body, dict) and len(reply.body.get("models", {})) == 1:
        state = next(iter(reply.body["models"].values())).get("state")
    return (PASS if reply.status == 200 and state == "loaded" else FAIL), f"HTTP {reply.status}, model state {state}"


def check_models(t):
    reply = t.api.get("/v1/models")
    if not reply.ok:
        return FAIL, reply.error()
    entry = next((m for m in reply.body.get("data", []) if m.get("id") == t.model), None)
    if entry is None:
        return FAIL, f"{t.model!r} not in /v1/models ({', '.join(m.get('id', '?') for m in reply.body.get('data', []))})"
    t.n_ctx = (entry.get("meta") or {}).get("context_length")
    return PASS, f"listed, context_length {t.n_ctx}"


def check_chat(t):
    """A greedy chat reply: content, usage adding up, a finish reason; kept as the reference."""
    reply = t.chat()
    if not reply.ok:
        return FAIL, reply.error()
    usage, content = reply.body.get("usage") or {}, api.message(reply).get("content")
    sums = usage.get("total_tokens") == usage.get("prompt_tokens", 0) + usage.get("completion_tokens", -1)
    t.reference = reply
    if not isinstance(content, str) or not content or not sums or api.finish(reply) not in ("stop", "length"):
        return FAIL, f"content {content!r:.60}, usage {usage}, finish_reason {api.finish(reply)}"
    tps = usage["completion_tokens"] / reply.seconds
    return PASS, f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} tokens in {reply.seconds:.2f} s " \
                 f"({tps:.1f} tok/s), finish {api.finish(reply)}"


SMOKE = (check_health, check_models, check_chat)


# ---- the functional checks (--full)


def check_streaming(t):
    """The same greedy request streamed: the same text, role first, [DONE] last."""
    s = t.api.stream("/v1/chat/completions", api.chat(t.model, PROMPT, 24, stream_options={"include_usage": True}))
    want = api.message(t.reference).get("content") if t.reference else None
    if s.error or not s.done:
        return FAIL, s.error or "the stream ended without data: [DONE]"
    if s.text != want or s.roles[:1] != ["assistant"] or s.finish_reason != api.finish(t.reference):
        return FAIL, f"streamed {s.text!r:.60} (finish {s.finish_reason}), non-streamed {want!r:.60}"
    return PASS, f"{s.chunks} chunks, first token {s.first:.2f} s, same text and finish as non-streamed"


def check_stop(t):
    """A stop string from the middle of the greedy text: the reply ends just before it."""
    text = api.message(t.reference).get("content") or "" if t.reference else ""
    stop, cut = _stop_string(text)
    if stop is None:
        return FAIL, f"the greedy reply {text!r:.40} is too short to pick a stop string from"
    reply = t.chat(stop=[stop])
    got = api.message(reply).get("content")
    if not reply.ok or got != text[:cut] or api.finish(reply) != "stop":
        return FAIL, f"stop {stop!r}: got {got!r:.60} (finish {api.finish(reply)}), want {text[:cut]!r:.60}"
    return PASS, f"stop {stop!r} ended the reply at character {cut}, finish stop"


def _stop_string(text):
    """(stop, where it first occurs): 4+ characters starting near the middle, first seen there."""
    for start in range(len(text) // 2, len(text) - 3):
        stop = text[start:start + 6].strip()
        if len(stop) >= 4 and text.find(stop) > 0:
            return stop, text.find(stop)
    return None, None


def check_ctx_refusal(t):
    """A prompt longer than the context is refused with a 400 naming it, and the server stays up."""
    if not t.n_ctx:
        return FAIL, "no context_length in /v1/models"
    reply = t.chat("hello " * (t.n_ctx + 64), max_tokens=8)
    health = t.api.get("/health")
    if reply.status != 400 or health.status != 200:
        return FAIL, f"{reply.error() if reply.status else reply.body}; /health then {health.status}"
    return PASS, f"{reply.error()[:200]}; /health still 200"


def check_tools(t):
    """tool_choice naming a function: the reply is a parsed tool call with JSON arguments. Without
    one, SKIP only when the model's chat template is known to have no tools; else FAIL."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = t.chat("What is the weather in Paris?", 64, tools=[TOOL], tool_choice=choice)
    calls = (api.message(reply).get("tool_calls") or []) if reply.ok else []
    fn = (calls[0].get("function") or {}) if calls else {}
    if fn.get("name") == "get_weather" and isinstance(_json(fn.get("arguments")), dict) \
            and api.finish(reply) == "tool_calls":
        return PASS, f"get_weather({fn['arguments']}), finish tool_calls"
    template = chat_template(t)
    if template == "":
        return SKIP, "the model's GGUF has no tokenizer.chat_template and no tool call came back: tools run " \
                     "only where the template has them"
    if template is not None and "tool" not in template:
        return SKIP, "the model's chat template has no tools"
    if not reply.ok:
        return FAIL, reply.error()
    if not calls:
        return FAIL, f"no tool_calls (content {api.message(reply).get('content')!r:.60})"
    return FAIL, f"tool call {fn}, finish {api.finish(reply)}"


def check_json_schema(t):
    """response_format json_schema (strict) with a schema whose longest answer fits SCHEMA_BUDGET: the
    reply ends by itself (a cut-off answer is its own failure) and parses and validates."""
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    reply = t.chat("Name a large city and its population, as JSON.", SCHEMA_BUDGET, response_format=fmt)
    if not reply.ok:
        return FAIL, reply.error()
    content = api.message(reply).get("content")
    if api.finish(reply) == "length":
        return FAIL, f"truncated: finish length at max_tokens {SCHEMA_BUDGET}, though no answer the schema " \
                     f"allows needs more than 61 tokens (the output was not held to it): {content!r:.80}"
    problem = schema_problem(_json(content))
    if problem:
        return FAIL, f"does not validate ({problem}; finish {api.finish(reply)}): {content!r:.80}"
    return PASS, f"valid, finish {api.finish(reply)}: {content}"


def schema_problem(value):
    """Why `value` breaks SCHEMA, or None (SCHEMA is fixed, so its rules are spelt out here)."""
    if not isinstance(value, dict):
        return "not a JSON object"
    if set(value) != {"city", "population"}:
        return f"keys {sorted(value)}, want city and population only"
    city, population = value["city"], value["population"]
    if not isinstance(city, str) or not re.fullmatch(CITY, city):
        return f"city {city!r} does not match {CITY}"
    if isinstance(population, bool) or not isinstance(population, int) or not 0 <= population <= MAX_POPULATION:
        return f"population {population!r} is not an integer in 0..{MAX_POPULATION}"
    return None


def _json(text):
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def check_concurrency(t):
    """CONCURRENCY identical greedy requests at once: all answer, all equal the single reply."""
    want = api.message(t.reference).get("content") if t.reference else None
    start = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        replies = list(pool.map(lambda _: t.chat(), range(CONCURRENCY)))
    wall = time.monotonic() - start
    bad = [r.error() if not r.ok else repr(api.message(r).get("content"))[:40]
           for r in replies if not r.ok or api.message(r).get("content") != want]
    if bad:
        return FAIL, f"{len(bad)} of {CONCURRENCY} differ or failed: {bad[0]}"
    return PASS, f"{CONCURRENCY} streams in {wall:.2f} s (one alone took {t.reference.seconds:.2f} s), same text"


def check_cache_reuse(t):
    """The two reuses a user expects, each of at least REUSE of the prompt: a conversation under one
    X-Session-Id, whose turn 2 (turn 1, its reply, a new question) finds turn 1's prompt cached; and
    the same prompt sent again without a session id (the prefix cache across requests)."""
    prompt = "Remember this list: " + ", ".join(f"item {i}" for i in range(_list_len(t))) + ". " + PROMPT
    turns = _conversation(t, prompt)
    if isinstance(turns, str):
        return FAIL, turns
    first, second = turns
    want, cached = first.body["usage"]["prompt_tokens"], api.cached_tokens(second.body.get("usage"))
    repeat = _repeat(t, prompt)
    if isinstance(repeat, str):
        return FAIL, f"repeat without a session id: {repeat}"
    figures = f"turn 2 reused {cached} of turn 1's {want} prompt tokens ({first.seconds:.2f} s then " \
              f"{second.seconds:.2f} s); a repeat without a session id: {repeat[0]} of {repeat[1]} cached"
    if cached < REUSE * want:
        return FAIL, "the conversation's history was prefilled again: " + figures
    if repeat[0] < REUSE * repeat[1]:
        return FAIL, "a repeated prompt was prefilled again (no prefix cache across requests): " + figures
    return PASS, figures


REUSE = 0.9      # a few tokens may be re-read where a template renders a reply differently


def _list_len(t):
    return max(8, min(200, (t.n_ctx or 512) // 8))


def _conversation(t, prompt):
    """(turn 1, turn 2) replies of one session, or why they failed."""
    headers = {"X-Session-Id": f"pantheon-verify-{time.time_ns()}"}
    messages = [{"role": "user", "content": prompt}]
    first = t.api.post("/v1/chat/completions", _body(t, messages), headers)
    if not first.ok:
        return f"turn 1: {first.error()}"
    messages += [{"role": "assistant", "content": api.message(first).get("content") or ""},
                 {"role": "user", "content": "Say that again."}]
    second = t.api.post("/v1/chat/completions", _body(t, messages), headers)
    return (first, second) if second.ok else f"turn 2: {second.error()}"


def _body(t, messages):
    return {"model": t.model, "messages": messages, "max_tokens": 8, "temperature": 0}


def _repeat(t, prompt):
    """(cached, prompt tokens) of the second of two identical session-less requests, or why they failed."""
    first, second = t.chat(prompt, 8), t.chat(prompt, 8)
    if not (first.ok and second.ok):
        return (first if not first.ok else second).error()
    return api.cached_tokens(second.body.get("usage")), second.body["usage"]["prompt_tokens"]


FULL = (*SMOKE, check_streaming, check_stop, check_ctx_refusal, check_tools, check_json_schema,
        check_concurrency, check_cache_reuse)


def chat_template(t):
    """The model's chat template: llama-server's /props, else its GGUF read through /admin/models
    when the file is on this machine; None when neither says."""
    props = t.api.get(f"/props?model={t.model}")
    if props.ok and isinstance(props.body.get("chat_template"), str):
        return props.body["chat_template"]
    models = t.api.get("/admin/models")
    path = next((m.get("path") for m in (models.body or {}).get("models", []) if m.get("name") == t.model), None) \
        if models.ok else None
    return _template_from_file(path) if path else None


def _template_from_file(path):
    try:
        layout, _ = hub.read_gguf_header(hub.file_reader(path), os.path.getsize(path), path)
    except (OSError, GGUFError):
        return None
    return "" if layout is None else str(layout.metadata.get("tokenizer.chat_template", ""))


def run_verify(inv, out, err):
    """The verify command: exit 0 when nothing FAILs (SKIPs are listed with their reason), 3 otherwise."""
    from pantheon.ctl.stress import STRESS

    target = Target(api.Api(inv.url, key=inv.token, timeout=max(inv.http_timeout, 600)), inv.target)
    checks = STRESS if inv.stress else (FULL if inv.full else SMOKE)
    if inv.stress:
        checks = (check_health, check_models, *checks)
    kind = "stress" if inv.stress else ("full" if inv.full else "smoke")
    out.write(f"verify {kind} {inv.target} at {inv.url}\n")
    outcomes = run_checks(checks, target, out)
    failed = [o.name for o in outcomes if o.status == FAIL]
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, SKIP)}
    out.write(f"{'FAIL' if failed else 'PASS'}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
              + (f" ({', '.join(failed)})" if failed else "") + "\n")
    out.write(json.dumps({"verify": kind, "model": inv.target, "passed": not failed,
                          "checks": [o.__dict__ for o in outcomes]}) + "\n")
    return 3 if failed else 0
