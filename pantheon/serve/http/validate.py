"""Request schema checks: every field known, typed and in range, or a 400 that names it."""

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Optional

from pantheon.serve.http import llama_fields, sampler_order, vllm_fields
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import (INT32_MAX, MAX_CHOICES, MAX_TOP_LOGPROBS, bad, boolean, divisor, integer,
                                             known_object, last_n, number, positive, seed, show, string, top_k)

MAX_STOPS = 32  # OpenAI takes 4; llama-server and vLLM any number, and their chat UIs send a dozen
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MESSAGE_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "reasoning_content"}
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n",
                   "presence_penalty", "frequency_penalty", "logit_bias", "seed", "min_tokens", *llama_fields.SAMPLERS)
MAX_PROMPTS = 16                   # prompts in one /v1/completions request: each runs as its own generation
_TOKEN_KEY = re.compile(r"[0-9]{1,10}")  # ASCII digits only: "²".isdigit() is true but int("²") fails


@dataclass
class Parsed:
    """A validated request; sampling holds SamplingParams keyword arguments the client set."""

    model: Optional[str] = None
    messages: Optional[list] = None
    prompt: object = None  # completions: a list of prompts, each a str or a list of token ids
    max_tokens: Optional[int] = None
    sampling: dict = field(default_factory=dict)
    stop: tuple = ()
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # vLLM's stream_options.continuous_usage_stats (with include_usage)
    user: Optional[str] = None
    tools: Optional[list] = None
    tool_choice: object = "auto"  # "auto" | "none" | "required" | {"type": "function", "function": {"name"}}
    parallel_tool_calls: bool = True
    reasoning_format: Optional[str] = None  # None: the server's --reasoning-format
    template_kwargs: dict = field(default_factory=dict)
    response_format: Optional[dict] = None
    echo: bool = False  # completions: the prompt's text leads the answer; chat (vLLM's): see chat_plan.echoed
    suffix: Optional[str] = None  # completions: text after the gap; the prompt is filled in the middle
    stop_token_ids: tuple = ()  # vLLM's: token ids that end the answer, besides the model's own
    logprobs: Optional[int] = None  # None: no logprobs; k: each token's logprob and its k best alternatives
    n: int = 1  # choices per prompt, sampled from one prompt prefill
    grammar: Optional[str] = None  # compiled llama-server `grammar` or `json_schema` the answer follows
    ignore_eos: bool = False  # llama-server's: the end-of-generation tokens are banned
    timings_per_token: bool = False  # llama-server's: every stream chunk carries the timings so far
    predict_limit: Optional[float] = None  # llama-server's t_max_predict_ms, in seconds: see Generation
    min_indent: int = 0  # llama-server's n_indent: see Generation
    best_of: int = 1  # completions: candidates generated per prompt, the n best by logprob per token answered
    reasoning_budget: int = 0  # tokens of thinking before the think block is closed; 0: the model's default
    dry_sequence_breakers: Optional[tuple] = None  # llama-server's: DRY's breakers as text (None: its default)
    post_sampling: bool = False  # llama-server's post_sampling_probs: logprobs as the sampler drew (see TokenText)
    prompt_logprobs: Optional[int] = None  # vLLM's: each prompt token's logprob, rank and this many alternatives
    continue_final: bool = False  # vLLM's continue_final_message: the final assistant message starts the reply
    include_stop: bool = False  # vLLM's include_stop_str_in_output: the text ends with the stop string it matched
    tokens_as_ids: bool = False  # vLLM's return_tokens_as_token_ids: logprobs' tokens read "token_id:N"
    add_special: bool = True  # vLLM's add_special_tokens: a text completion prompt starts with BOS (per metadata)
    bad_words: tuple = ()  # vLLM's: words the answer may not make (tokenized per model: completions.bad_word_ids)
    truncate: Optional[int] = None  # vLLM's truncate_prompt_tokens: the prompt keeps its last tokens (truncation)
    skip_special: bool = True  # vLLM's skip_special_tokens: false writes control tokens' text into the answer
    return_ids: bool = False  # vLLM's return_token_ids: the prompt's and each choice's token ids in the answer
    request_id: Optional[str] = None  # vLLM's: the answer's id after its chatcmpl- or cmpl- (else random)
    private: bool = False  # shares no kept KV cache: vLLM's cache_salt, llama-server's cache_prompt false



def logit_bias(name, v):
    if not isinstance(v, dict):
        raise bad(name, "expected an object mapping token ids to numbers")
    out = {}
    for key, value in v.items():
        token = key.strip()
        if not _TOKEN_KEY.fullmatch(token) or int(token) > INT32_MAX:
            raise bad(name, f"key {show(key)} is not a token id (ASCII digits, at most {INT32_MAX})",
                      "invalid_value")
        out[int(token)] = number(f"{name}[{token}]", value)
    return out


def stop(name, v):
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad(name, "expected a string or a list of strings")
    if len(stops) > MAX_STOPS:
        raise bad(name, f"at most {MAX_STOPS} stop strings, got {len(stops)}", "invalid_value")
    if any(s == "" for s in stops):
        raise bad(name, "stop strings must not be empty", "invalid_value")
    return tuple(stops)


def best_of(name, v):
    """Candidates generated per prompt, of which the n best are answered (at least n: checked in check())."""
    return integer(name, v, 1, MAX_CHOICES)


def response_format(name, v):
    """{"type": "text"}, {"type": "json_object"}, or {"type": "json_schema", "json_schema": {"schema", ...}}."""
    kind = v.get("type") if isinstance(v, dict) else None
    if kind in ("text", "json_object") and set(v) <= {"type", "schema"}:
        return v
    spec = v.get("json_schema") if kind == "json_schema" else None
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise bad(name, "expected {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                  f"\"json_schema\", \"json_schema\": {{\"name\", \"schema\"}}}}, got {show(v)}",
                  "invalid_value")
    return v


def tool_choice(name, v):
    """"auto", "none", "required", or {"type": "function", "function": {"name": ...}}."""
    if v in ("auto", "none", "required"):
        return v
    fn = v.get("function") if isinstance(v, dict) and v.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(name, "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                  f"\"function\": {{\"name\": ...}}}}, got {show(v)}", "invalid_value")
    return {"type": "function", "function": {"name": fn["name"]}}


def reasoning_format(name, v):
    if v not in ("auto", "deepseek", "none"):
        raise bad(name, f"expected \"auto\", \"deepseek\" or \"none\", got {show(v)}", "invalid_value")
    return v


def template_kwargs(name, v):
    if not isinstance(v, dict):
        raise bad(name, "expected an object of template variables")
    return v


# OpenAI's reasoning efforts. Chat templates that read a `reasoning_effort` variable (gpt-oss, DeepSeek V4,
# Solar Open) get the request's; the others render as without it.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def reasoning_effort(name, v):
    if v not in EFFORTS:
        raise bad(name, f"expected {', '.join(EFFORTS[:-1])} or {EFFORTS[-1]}, got {show(v)}", "invalid_value")
    return v


def ignored(check):
    """A field accepted for compatibility and then dropped: it does not change what is generated."""

    def accept(name, v):
        check(name, v)
        return IGNORED

    return accept


def anything(name, v):
    return v


def string_map(name, v):
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise bad(name, "expected an object of string values")
    return v


def modalities(name, v):
    if not isinstance(v, list) or not all(isinstance(m, str) for m in v):
        raise bad(name, "expected a list of strings")
    if any(m != "text" for m in v):
        raise bad(name, f"only the \"text\" modality is supported, got {show(v)}", "unsupported_value")
    return v


def prediction(name, v):
    """Predicted outputs only speed OpenAI up, never change the answer: checked, then ignored."""
    if not isinstance(v, dict) or v.get("type") != "content":
        raise bad(name, "expected an object with \"type\": \"content\"", "invalid_value")
    content(f"{name}.content", v.get("content"), "user")
    return v


def functions(name, v):
    """The legacy `functions` list, as the `tools` it stands for."""
    if not isinstance(v, list):
        raise bad(name, "expected a list of functions")
    return tools(name, [{"type": "function", "function": f} for f in v])


def function_call(name, v):
    """The legacy `function_call` ("none", "auto" or {"name": ...}) as the `tool_choice` it stands for."""
    if isinstance(v, dict) and set(v) == {"name"}:
        v = {"type": "function", "function": v}
    return tool_choice(name, v)


def tools(name, v):
    if not isinstance(v, list):
        raise bad(name, "expected a list of tools")
    for i, tool in enumerate(v):
        where = f"{name}[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise bad(where, "each tool must be an object with \"type\": \"function\"", "invalid_value")
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"{where}.function", "expected an object with a string \"name\"", "invalid_value")
    return v


STREAM_OPTIONS = ("include_usage", "continuous_usage_stats", "include_obfuscation")


def stream_options(name, v):
    """include_usage; vLLM's continuous_usage_stats (with it, every chunk carries the usage so far); OpenAI's
    include_obfuscation is checked and ignored (no padding is added to chunks)."""
    if not isinstance(v, dict):
        raise bad(name, "expected an object")
    for key in v:
        if key not in STREAM_OPTIONS:
            raise bad(f"{name}.{key}", "unknown field", "unknown_field")
    return {key: boolean(f"{name}.{key}", v.get(key, False)) for key in STREAM_OPTIONS}


def content(name, v, role):
    if v is None and role in ("assistant", "tool"):
        return v
    if isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise bad(name, "expected a string or a list of text parts")
    for j, part in enumerate(v):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise bad(f"{name}[{j}].type", "only text parts are supported", "unsupported_value")
        string(f"{name}[{j}].text", part.get("text"))
    return v


def messages(name, v):
    if not isinstance(v, list) or not v:
        raise bad(name, "expected a non-empty list of messages")
    return [_message(f"{name}[{i}]", m) for i, m in enumerate(v)]


def _message(where, m):
    known_object(where, m, MESSAGE_KEYS)
    role = m.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise bad(f"{where}.role", f"expected one of {sorted(ROLES)}, got {show(role)}", "invalid_value")
    out = dict(m, role=ROLES[role], content=content(f"{where}.content", m.get("content"), ROLES[role]))
    for key in ("name", "tool_call_id"):
        if out.get(key) is not None:
            string(f"{where}.{key}", out[key])
    return out


def token_ids(name, v):
    if not isinstance(v, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        raise bad(name, "expected a list of token ids")
    return v


def is_ids(v):
    """Whether `v` is a non-empty list of integers (token ids, range-checked per model later)."""
    return isinstance(v, list) and bool(v) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)


def prompt(name, v):
    """The list of prompts: a string, a list of token ids (range checked per model), or a list of either."""
    if isinstance(v, str) or is_ids(v):
        return [v]
    if not isinstance(v, list) or not v or not all(isinstance(p, str) or is_ids(p) for p in v):
        raise bad(name, "expected a string, a non-empty list of token ids, or a non-empty list of those")
    if len(v) > MAX_PROMPTS:
        raise bad(name, f"at most {MAX_PROMPTS} prompts per request, got {len(v)}", "invalid_value")
    return v


def top_logprobs(name, v):
    return integer(name, v, 0, MAX_TOP_LOGPROBS)


IGNORED = object()  # what an accepted-and-ignored field checks to; dropped from the values
# OpenAI fields that change nothing we generate: accepted, shape-checked, ignored (docs/http-api.md).
LENIENT = {"store": ignored(boolean), "metadata": ignored(string_map), "service_tier": ignored(string),
           "prompt_cache_key": ignored(string), "safety_identifier": ignored(string)}
CHAT_LENIENT = dict(LENIENT, verbosity=ignored(string),
                    modalities=ignored(modalities), prediction=ignored(prediction),
                    parallel_tool_calls=boolean, functions=functions, function_call=function_call)

COMMON = {
    "model": string, "max_tokens": positive, "temperature": divisor, "top_p": number, "top_k": top_k,
    "min_p": number, "repeat_penalty": divisor, "repeat_last_n": last_n, "presence_penalty": number,
    "frequency_penalty": number, "logit_bias": logit_bias, "seed": seed, "stop": stop, "n": llama_fields.per_prompt,
    "stream": boolean, "stream_options": stream_options, "user": string,
}
CHAT = dict(COMMON, **CHAT_LENIENT, **llama_fields.EXTRAS, **vllm_fields.CHAT_FIELDS, messages=messages,
            max_completion_tokens=positive, tools=tools, tool_choice=tool_choice, response_format=response_format,
            reasoning_format=reasoning_format, chat_template_kwargs=template_kwargs, reasoning_effort=reasoning_effort,
            logprobs=boolean, top_logprobs=top_logprobs)
COMPLETIONS = dict(COMMON, **LENIENT, **llama_fields.EXTRAS, **vllm_fields.FIELDS, prompt=prompt,
                   logprobs=top_logprobs, echo=boolean, best_of=best_of, suffix=string)
TOKENIZE = {"model": string, "content": string, "add_special": boolean, "parse_special": boolean,
            "with_pieces": boolean}
DETOKENIZE = {"model": string, "tokens": token_ids}


def check(body, schema, required):
    """Parsed fields of a generation request body; RequestError naming the first bad or unknown field."""
    values = vllm_fields.restated(fields(body, schema, required))
    parsed = dataclasses.replace(_parsed(values), logprobs=_logprobs(values, "messages" in schema),
                                 grammar=_grammar(values))
    return _checked_best_of(parsed, values.get("best_of", parsed.n))


def _checked_best_of(parsed, best):
    """OpenAI's rules: best_of at least n, and no stream (the best is known only once all have ended)."""
    if best < parsed.n:
        raise bad("best_of", f"must be at least n ({parsed.n}), got {best}", "invalid_value")
    if best > parsed.n and parsed.stream:
        raise bad("best_of", "cannot be used with stream: the best candidates are known only at the end",
                  "invalid_value")
    return dataclasses.replace(parsed, best_of=best)


def _grammar(values):
    """llama-server's grammar or json_schema, or vLLM's guided_* / structured_outputs, which cannot be combined
    with another constraint."""
    compiled, name = llama_fields.compiled_grammar(values), "grammar" if values.get("grammar") else "json_schema"
    if values.get("guided") is not None:
        if compiled is not None:
            raise bad(values["guided"][0], f"give {values['guided'][0]} or {name}, not both", "invalid_value")
        compiled, name = llama_fields.compiled_guided(values["guided"]), values["guided"][0]
    if compiled is not None and (values.get("response_format") or {}).get("type", "text") != "text":
        raise bad(name, f"give {name} or response_format, not both", "invalid_value")
    choice = values.get("tool_choice", values.get("function_call", "auto"))
    if compiled is not None and values.get("tools", values.get("functions")) and choice not in ("auto", "none"):
        raise bad(name, f"a forced tool call has its own grammar: give {name} or tool_choice "
                  f"{show(choice)}, not both", "invalid_value")
    return compiled


def _logprobs(values, chat):
    """Chat: logprobs true, with top_logprobs alternatives (OpenAI refuses top_logprobs without it);
    completions: logprobs is the number of alternatives (with echo, the prompt's tokens are scored
    too). Without them, llama-server's n_probs asks for the same (as llama-server maps it)."""
    if chat:
        if values.get("top_logprobs") is not None and not values.get("logprobs"):
            raise bad("top_logprobs", "requires \"logprobs\": true", "invalid_value")
        asked = values.get("top_logprobs", 0) if values.get("logprobs") else None
    else:
        asked = values.get("logprobs")
    if asked is None and values.get("n_probs"):
        asked = values["n_probs"]
    return asked


def fields(body, schema, required=()):
    """{name: checked value} of a decoded JSON body (nulls dropped); RequestError naming a bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    for name in body:
        if name not in schema:
            raise bad(name, "unknown field", "unknown_field")
    for name in required:
        if body.get(name) is None:
            raise bad(name, "required", "missing_required_parameter")
    checked = {k: schema[k](k, v) for k, v in body.items() if v is not None}
    return {k: v for k, v in checked.items() if v is not IGNORED}


def check_restated(body, names):
    """check() of a chat body restated from another API's fields; a refusal names the field the client sent
    (`names`: chat field -> that API's field) where it was renamed."""
    try:
        return check(body, CHAT, ())
    except RequestError as exc:
        source = names.get(exc.param)
        if source is None:
            raise
        raise RequestError(source + str(exc)[len(exc.param):], param=source, code=exc.code,
                           status=exc.status) from None


def _breaker_texts(values):
    texts = values.get("dry_sequence_breakers")
    return None if texts is None else tuple(texts)


def _template_variables(values):
    """chat_template_kwargs, with reasoning_effort and vLLM's documents as template variables unless the kwargs
    set them."""
    named = {k: values[k] for k in ("reasoning_effort", "documents") if k in values}
    return {**named, **values.get("chat_template_kwargs", {})}


def _parsed(values):
    limit = llama_fields.generation_limit(values, "max_completion_tokens", "max_tokens")
    options, sampled = values.get("stream_options", {}), SAMPLING_FIELDS + ("allowed_ids",)
    return Parsed(model=values.get("model"), messages=values.get("messages"), prompt=values.get("prompt"),
                  max_tokens=limit, sampling=sampler_order.apply({k: values[k] for k in sampled if k in values},
                                                                 values.get("samplers")),
                  stop=values.get("stop", ()), stream=values.get("stream", False),
                  include_usage=options.get("include_usage", False), user=values.get("user"),
                  continuous_usage=options.get("continuous_usage_stats", False),
                  tools=values.get("tools", values.get("functions")),
                  tool_choice=values.get("tool_choice", values.get("function_call", "auto")),
                  parallel_tool_calls=values.get("parallel_tool_calls", True),
                  reasoning_format=values.get("reasoning_format"),
                  template_kwargs=_template_variables(values),
                  response_format=values.get("response_format"), echo=values.get("echo", False),
                  suffix=values.get("suffix"), stop_token_ids=tuple(values.get("stop_token_ids", ())),
                  n=llama_fields.choice_count(values), ignore_eos=values.get("ignore_eos", False),
                  timings_per_token=values.get("timings_per_token", False),
                  predict_limit=llama_fields.predict_limit(values), min_indent=values.get("n_indent", 0),
                  dry_sequence_breakers=_breaker_texts(values),
                  post_sampling=values.get("post_sampling_probs", False),
                  prompt_logprobs=values.get("prompt_logprobs"), continue_final=values.get("continue_final", False),
                  include_stop=values.get("include_stop_str_in_output", False),
                  tokens_as_ids=values.get("return_tokens_as_token_ids", False),
                  truncate=values.get("truncate_prompt_tokens"), skip_special=values.get("skip_special_tokens", True),
                  return_ids=values.get("return_token_ids", False), request_id=values.get("request_id"),
                  private=llama_fields.private(values),
                  add_special=values.get("add_special_tokens", True), bad_words=values.get("bad_words", ()))
