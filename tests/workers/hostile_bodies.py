"""Hypothesis strategies for hostile request bodies: structural junk and numeric extremes per field."""

from urllib.parse import quote

from hypothesis import strategies as st

from pantheon.serve.http import (anthropic_fields, embeddings, ollama_fields, rerank, responses_fields,
                                 validate)

F32_MAX, F32_TINY = 3.4028234663852886e38, 1.1754943508222875e-38
EXTREME_NUMBERS = [F32_MAX, -F32_MAX, 3.5e38, -3e38, 1e39, F32_TINY, 1e-38, 1e-45, 5e-324, -5e-324, 0.0, -0.0,
                   2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -2**63 - 1, 10**30, -1, 0, 1, 0.5, 1.0000001]
UNICODE_DIGITS = ["\u00b2", "\u0661", "\u0967", "\uff11", "\U0001d7d9", "1\u00b2", " 5 ", "-1", "+3", "1e3", "0x10",
                  "9" * 11, "9" * 5000, ""]

numbers = st.one_of(st.sampled_from(EXTREME_NUMBERS), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.integers(-2**70, 2**70), st.floats(-1e-30, 1e-30))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12), st.sampled_from(UNICODE_DIGITS))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=3), max_leaves=8)


def field(good):
    """Mostly plausible values, sometimes extremes, sometimes any JSON at all."""
    return st.one_of(good, numbers, junk)


bias_keys = st.one_of(st.integers(0, 5000).map(str), st.sampled_from(UNICODE_DIGITS), st.text(max_size=4))
logit_bias = st.dictionaries(bias_keys, numbers, max_size=4)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
message = st.fixed_dictionaries({"role": field(roles), "content": field(st.text(max_size=40))},
                                optional={"name": field(st.text(max_size=8)), "tool_calls": junk,
                                          "tool_call_id": junk, "junk": junk})

SAMPLING = {
    "temperature": field(st.floats(0, 2)), "top_p": field(st.floats(0, 1)), "top_k": field(st.integers(0, 100)),
    "min_p": field(st.floats(0, 1)), "repeat_penalty": field(st.floats(0.5, 2)),
    "repeat_last_n": field(st.integers(-1, 64)), "presence_penalty": field(st.floats(-2, 2)),
    "frequency_penalty": field(st.floats(-2, 2)), "logit_bias": field(logit_bias), "seed": field(st.integers()),
    "stop": field(st.lists(st.text(min_size=1, max_size=4), max_size=5)), "stream": field(st.booleans()),
    "stream_options": field(st.fixed_dictionaries(
        {"include_usage": st.booleans()},
        optional={"continuous_usage_stats": st.booleans(), "include_obfuscation": st.booleans()})),
    "user": field(st.text(max_size=8)),
    "n": field(st.just(1)), "model": field(st.just("m")), "prompt_logprobs": field(st.integers(-2, 22)),
    "allowed_token_ids": field(st.lists(st.integers(-2, 70000), max_size=4)),
    "bad_words": field(st.lists(st.text(max_size=6), max_size=4)),
    "truncate_prompt_tokens": field(st.integers(-2, 300)), "skip_special_tokens": field(st.booleans()),
    "return_token_ids": field(st.booleans()), "cache_salt": field(st.text(max_size=6)),
    "cache_prompt": field(st.booleans()),
    "request_id": field(st.one_of(st.from_regex(r"[A-Za-z0-9._:/+=-]{1,20}", fullmatch=True), st.text(max_size=8))),
}
# max_tokens stays small when valid (the fuzz is about refusals, not long generations); so does
# n_predict, which wins over it: its -1 and large counts would run each case to the end of the context
MAX_TOKENS = st.one_of(st.integers(1, 4), numbers, junk)
N_PREDICT = st.one_of(st.integers(1, 4), st.sampled_from([0, -2, -2**31, 2**31, 10**30, 1.5, "3", True, None, [], {}]))



def every_field(schema, specific, required):
    """Each field of the endpoint's schema: a specific strategy where one is written, junk otherwise,
    so a field added to the schema is fuzzed without editing this file."""
    return {k: specific.get(k, junk) for k in schema if k not in required}


completions = st.fixed_dictionaries(
    {"prompt": field(st.one_of(st.text(max_size=40), st.lists(st.integers(-5, 5000), min_size=1, max_size=8))),
     "max_tokens": MAX_TOKENS},
    optional=dict(every_field(validate.COMPLETIONS, dict(SAMPLING, n_predict=N_PREDICT), ("prompt", "max_tokens")),
                  extra=junk))
chat = st.fixed_dictionaries(
    {"messages": field(st.lists(message, min_size=1, max_size=3)), "max_tokens": MAX_TOKENS},
    optional=dict(every_field(validate.CHAT, dict(SAMPLING, max_completion_tokens=field(st.integers(1, 4)),
                                                  n_predict=N_PREDICT, add_generation_prompt=field(st.booleans()),
                                                  continue_final_message=field(st.booleans()),
                                                  echo=field(st.booleans()),
                                                  documents=field(st.lists(st.dictionaries(
                                                      st.text(max_size=5), st.text(max_size=10), max_size=2),
                                                      max_size=2))),
                              ("messages", "max_tokens")), extra=junk))
tokenize = st.fixed_dictionaries({"content": field(st.text(max_size=40))},
                                 optional={"model": field(st.just("m")), "add_special": junk,
                                           "parse_special": junk, "with_pieces": junk})
vllm_tokenize = st.one_of(  # vLLM's bodies on the same route: a prompt, or a chat
    st.fixed_dictionaries({"prompt": field(st.text(max_size=40))},
                          optional={"model": field(st.just("m")), "add_special_tokens": junk, "return_token_strs": junk,
                                    "extra": junk}),
    st.fixed_dictionaries({"messages": field(st.lists(message, max_size=3))},
                          optional={"model": field(st.just("m")), "add_special_tokens": junk, "return_token_strs": junk,
                                    "add_generation_prompt": junk, "tools": junk}))
detokenize = st.fixed_dictionaries({"tokens": field(st.lists(st.one_of(st.integers(-5, 5000), numbers), max_size=8))},
                                   optional={"model": field(st.just("m"))})
# embedding inputs stay few and short when valid: the fuzz is about refusals, not a die's throughput
embed_input = field(st.one_of(st.text(max_size=20), st.lists(st.integers(-5, 5000), min_size=1, max_size=6),
                              st.lists(st.one_of(st.text(max_size=8), st.lists(st.integers(-5, 5000), max_size=4)),
                                       max_size=3)))
embed = st.fixed_dictionaries({"input": embed_input}, optional=dict(every_field(
    embeddings.OPENAI, {"model": field(st.just("m")), "dimensions": field(st.integers(-2, 300)),
                        "encoding_format": field(st.sampled_from(["float", "base64"])),
                        "truncate_prompt_tokens": field(st.integers(-2, 300))}, ("input",)), extra=junk))
native_embed = st.fixed_dictionaries({"content": embed_input}, optional=dict(every_field(
    embeddings.NATIVE, {"model": field(st.just("m")), "embd_normalize": field(st.integers(-3, 4))}, ("content",)),
    extra=junk))
rerank_body = st.fixed_dictionaries(
    {"query": field(st.text(max_size=20)), "documents": field(st.lists(st.text(max_size=8), max_size=3))},
    optional=dict(every_field(rerank.SCHEMA, {"model": field(st.just("m")), "top_n": field(st.integers(-2, 4))},
                              ("query", "documents")), extra=junk))
score_side = field(st.one_of(st.text(max_size=12), st.lists(st.text(max_size=8), max_size=3)))
score_body = st.fixed_dictionaries({"text_1": score_side, "text_2": score_side},
                                   optional={"model": field(st.just("m")), "truncate_prompt_tokens": junk,
                                             "user": junk, "extra": junk})
# Ollama's bodies: num_predict stays small when valid (Ollama streams, and without it a reply runs long)
ollama_options = st.one_of(
    st.fixed_dictionaries({"num_predict": st.integers(1, 4)}, optional=dict(
        {k: field(v) for k, v in (("temperature", st.floats(0, 2)), ("top_k", st.integers(0, 100)),
                                  ("top_p", st.floats(0, 1)), ("seed", st.integers()), ("num_ctx", st.integers()),
                                  ("stop", st.lists(st.text(min_size=1, max_size=4), max_size=3)))},
        mirostat=junk, typical_p=junk, repeat_last_n=numbers, num_thread=junk, bogus=junk)),
    st.fixed_dictionaries({"num_predict": st.sampled_from([0, -3, -2**31 - 1, 2**31, 10**30, 1.5, "3", True, [], {}])}),
    junk.filter(lambda v: not isinstance(v, dict)))
ollama_message = st.fixed_dictionaries({"role": field(roles), "content": field(st.text(max_size=40))},
                                       optional={"images": junk, "tool_calls": junk, "tool_name": junk,
                                                 "thinking": junk, "junk": junk})
# the model is mostly one served (with or without Ollama's tag), so the other fields get looked at
OLLAMA = {"model": st.one_of(st.sampled_from(["m", "m:latest"]), st.sampled_from(["m", "m:latest"]),
                             field(st.just("m:7b"))), "stream": field(st.booleans()),
          "keep_alive": field(st.sampled_from(["5m", -1, 0, "1h30m", "0s"])),
          "format": field(st.sampled_from(["json", "", {"type": "object"}])), "think": field(st.booleans())}
ollama_chat = st.fixed_dictionaries(
    {"model": OLLAMA["model"], "messages": field(st.lists(ollama_message, max_size=3)), "options": ollama_options},
    optional=dict(every_field(ollama_fields.CHAT, OLLAMA, ("model", "messages", "options")), extra=junk))
ollama_generate = st.fixed_dictionaries(
    {"model": OLLAMA["model"], "prompt": field(st.text(max_size=40)), "options": ollama_options},
    optional=dict(every_field(ollama_fields.GENERATE, dict(
        OLLAMA, raw=field(st.booleans()), suffix=field(st.text(max_size=8)), system=field(st.text(max_size=8)),
        template=field(st.just("")), context=field(st.lists(st.integers(-5, 5000), max_size=6))),
        ("model", "prompt", "options")), extra=junk))
ollama_embed = st.fixed_dictionaries({"model": OLLAMA["model"],
                                      "input": field(st.one_of(st.text(max_size=20), st.lists(st.text(max_size=8),
                                                                                              max_size=3)))},
                                     optional=dict(every_field(ollama_fields.EMBED, dict(
                                         OLLAMA, truncate=field(st.booleans()), dimensions=field(st.integers(-2, 300))),
                                         ("model", "input")), extra=junk))
anthropic_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": field(st.text(max_size=20))},
                          optional={"cache_control": junk, "citations": junk}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": field(st.text(max_size=6)),
                           "name": field(st.text(max_size=6)),
                           "input": field(st.dictionaries(st.text(max_size=4), scalars, max_size=2))}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": field(st.text(max_size=6))},
                          optional={"content": field(st.text(max_size=10)), "is_error": junk}),
    st.fixed_dictionaries({"type": field(st.sampled_from(["thinking", "redacted_thinking", "image", "document"]))},
                          optional={"thinking": junk, "signature": junk, "data": junk, "source": junk}))
anthropic_message = st.fixed_dictionaries(
    {"role": field(st.sampled_from(["user", "assistant"])),
     "content": field(st.one_of(st.text(max_size=30), st.lists(anthropic_block, max_size=3)))}, optional={"junk": junk})
ANTHROPIC = dict(SAMPLING, stop_sequences=field(st.lists(st.text(min_size=1, max_size=4), max_size=3)),
                 system=field(st.one_of(st.text(max_size=10), st.lists(anthropic_block, max_size=2))),
                 thinking=field(st.sampled_from([{"type": "enabled", "budget_tokens": 2}, {"type": "disabled"},
                                                 {"type": "adaptive"}, {"type": "enabled"}])),
                 tool_choice=field(st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"},
                                                    {"type": "tool", "name": "f"}, {"type": "tool"}])),
                 tools=field(st.lists(st.fixed_dictionaries({"name": field(st.just("f")),
                                                             "input_schema": field(st.just({"type": "object"}))}),
                                      max_size=2)),
                 metadata=field(st.fixed_dictionaries({"user_id": field(st.text(max_size=5))})))
anthropic_messages = st.fixed_dictionaries(
    {"messages": field(st.lists(anthropic_message, min_size=1, max_size=3)), "max_tokens": MAX_TOKENS},
    optional=dict(every_field(anthropic_fields.MESSAGES, ANTHROPIC, ("messages", "max_tokens")), extra=junk))
response_part = st.fixed_dictionaries(
    {"type": field(st.sampled_from(["input_text", "output_text", "refusal", "input_image", "summary_text"]))},
    optional={"text": field(st.text(max_size=12)), "refusal": junk, "annotations": junk, "image_url": junk})
response_item = st.one_of(
    st.fixed_dictionaries({"role": field(st.sampled_from(["user", "assistant", "system", "developer", "tool"])),
                           "content": field(st.one_of(st.text(max_size=20), st.lists(response_part, max_size=2)))},
                          optional={"type": st.just("message"), "id": junk, "status": junk}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": field(st.text(max_size=5)),
                           "name": field(st.just("f")), "arguments": field(st.sampled_from(["{}", "{", ""]))}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": field(st.text(max_size=5)),
                           "output": field(st.one_of(st.text(max_size=8), st.lists(response_part, max_size=2)))}),
    st.fixed_dictionaries({"type": field(st.sampled_from(["reasoning", "item_reference", "web_search_call"]))},
                          optional={"summary": junk, "content": junk, "encrypted_content": junk, "id": junk}))
RESPONSES = dict(SAMPLING, max_output_tokens=MAX_TOKENS, instructions=field(st.text(max_size=10)),
                 tools=field(st.lists(st.fixed_dictionaries(
                     {"type": field(st.just("function")), "name": field(st.just("f"))},
                     optional={"parameters": field(st.just({"type": "object"}))}), max_size=2)),
                 tool_choice=field(st.sampled_from(["auto", "none", "required", {"type": "function", "name": "f"},
                                                    {"type": "function"}])),
                 text=field(st.sampled_from([{"format": {"type": "json_object"}}, {"format": {"type": "text"}},
                                             {"format": {"type": "json_schema", "schema": {"type": "object"}}}])),
                 include=field(st.lists(st.sampled_from(responses_fields.INCLUDES), max_size=2)),
                 top_logprobs=field(st.integers(0, 25)), truncation=field(st.sampled_from(["auto", "disabled", "x"])),
                 previous_response_id=field(st.sampled_from(["resp_0", "", "\ud800", "resp_\x00", "r" * 5000])))
responses = st.fixed_dictionaries(
    {"input": field(st.one_of(st.text(max_size=30), st.lists(response_item, min_size=1, max_size=3)))},
    optional=dict(every_field(responses_fields.RESPONSES, RESPONSES, ("input",)), extra=junk))
admin_load = st.fixed_dictionaries({}, optional={"path": field(st.sampled_from(["/proc/self/mem", "/dev/zero", "/",
                                                                                 "x" * 1025, "../../etc/passwd"])),
                                                 "name": field(st.text(max_size=70)), "dies": junk,
                                                 "ctx_cap": numbers, "batch_slots": numbers, "stream": junk})
# never the served model's name or slot: an accepted unload is not hostile input
admin_unload = st.fixed_dictionaries({}, optional={"name": field(st.text(max_size=8).filter(lambda n: n != "m")),
                                                   "slot": st.one_of(st.integers(1000, 2**70), st.floats(), junk).filter(
                                                       lambda v: not isinstance(v, int) or isinstance(v, bool)
                                                       or v >= 1000),
                                                   "timeout": numbers})


def nested(depth):
    return b"[" * depth + b"]" * depth


raw_bodies = st.one_of(st.integers(1, 200_000).map(nested), st.binary(max_size=40),
                       st.sampled_from([b'{"prompt": "x", "temperature": NaN}', b'{"prompt": "x", "top_p": Infinity}',
                                        b"", b"null", b"[]", b"{}", b'"x"', b"\xff\xfe", b'{"prompt": 1e999}']))

ENDPOINTS = [("/v1/completions", completions), ("/v1/chat/completions", chat), ("/tokenize", tokenize),
             ("/tokenize", vllm_tokenize),
             ("/detokenize", detokenize), ("/admin/models/load", admin_load), ("/admin/models/unload", admin_unload),
             ("/v1/embeddings", embed), ("/embedding", native_embed), ("/v1/rerank", rerank_body),
             ("/score", score_body),
             ("/api/chat", ollama_chat), ("/api/generate", ollama_generate), ("/api/embed", ollama_embed),
             ("/v1/messages", anthropic_messages), ("/v1/responses", responses)]
requests = st.one_of(*[st.tuples(st.just(path), body) for path, body in ENDPOINTS],
                     st.tuples(st.sampled_from([p for p, _ in ENDPOINTS]), raw_bodies))

# ---- request lines: methods, paths and query strings of the routes that take no body
ROUTES = ["/v1/models", "/models", "/v1/models/{}", "/models/{}/{}", "/health", "/v1/health", "/metrics", "/props",
          "/slots", "/v1/responses/{}", "/responses/{}", "/v1/responses/{}/input_items", "/v1/responses/{}/cancel",
          "/api/tags", "/api/ps", "/api/version", "/admin/models", "/admin/dies", "/{}", "/v1/{}", "/api/{}"]
METHODS = ["GET", "GET", "GET", "DELETE", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"]
ODD = ["%zz", "%", "%00", "%2F", "%2e%2e", "..", "resp_", "resp_%FF%FE", "a%20b", "%C2%B2", "%D9%A3", "~", "x" * 3000]
segment = st.one_of(st.text(max_size=12).map(lambda t: quote(t, safe="")), st.sampled_from(ODD))
query_pair = st.tuples(st.one_of(st.sampled_from(["model", "limit", "order", "after", "id", "fail_on_no_slot",
                                                  "stream", "starting_after"]),
                                 segment),
                       st.one_of(segment, st.sampled_from(UNICODE_DIGITS).map(lambda t: quote(t, safe="")),
                                 st.sampled_from(["asc", "desc", "1", "100", "0", "-1", "m", "true"])))
query = st.lists(query_pair, max_size=4).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))


@st.composite
def request_lines(draw):
    """(method, path with query): a route's path with its {} filled by junk segments, and a query string."""
    route = draw(st.sampled_from(ROUTES))
    path = route.format(*[draw(segment) for _ in range(route.count("{}"))])
    q = draw(query)
    return draw(st.sampled_from(METHODS)), path + (f"?{q}" if q else "")
