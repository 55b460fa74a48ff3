"""llama-server's request fields beyond OpenAI's: /completion and the OpenAI routes take them alike."""

import json

from pantheon.errors import InvalidParameter
from pantheon.serve.http import sampler_order
from pantheon.serve.http.field_types import MAX_CHOICES, MAX_TOP_LOGPROBS, bad, boolean, integer, number, show, string
from pantheon.text import grammar as grammars

MAX_BREAKERS = 64  # DRY sequence breakers per request (llama-server's default list has 4)


def n_predict(name, v):
    """-1: until the context is full; 0: only the prompt is computed (into the prefix cache, which is
    how llama.vim warms it); otherwise that many tokens at most."""
    v = integer(name, v)
    if v >= -1:
        return v
    raise bad(name, f"expected -1, 0 or a positive count, got {v}", "invalid_value")


def zero_only(name, v):
    if v not in (0, 0.0) or isinstance(v, bool):
        raise bad(name, f"{name} is not supported (got {show(v)}); omit it or send 0", "unsupported_value")
    return v


def one_only(name, v):
    if v != 1 or isinstance(v, bool):
        raise bad(name, f"{name} is not supported (got {show(v)}); omit it or send 1.0", "unsupported_value")
    return v


def false_only(name, v):
    if v is not False and v != 0:
        raise bad(name, f"{name} is not supported (got {show(v)}); omit it or send false",
                  "unsupported_value")
    return v


def null_only(name, v):
    raise bad(name, f"{name} is not supported (got {show(v)}); omit it", "unsupported_value")


def json_object(name, v):
    if not isinstance(v, dict):
        raise bad(name, "expected a JSON schema object", "invalid_type")
    return v


def mirostat(name, v):
    """0 (off), 1 or 2: the mirostat version."""
    return integer(name, v, 0, 2)


def n_probs(name, v):
    """0 (none) up to MAX_TOP_LOGPROBS alternatives per token (llama-server allows more)."""
    return integer(name, v, 0, MAX_TOP_LOGPROBS)


def per_prompt(name, v):
    """Completions per prompt: OpenAI's `n`, llama-server's `n_cmpl` (a limit per model comes later)."""
    return integer(name, v, 1, MAX_CHOICES)


def indent(name, v):
    """n_indent: the least indentation (spaces and tabs) of the completion's later lines; 0 = any."""
    return integer(name, v, 0)


def strings(name, v):
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad(name, "expected a list of strings")
    return v


def breaker_texts(name, v):
    """DRY's sequence breakers: at most MAX_BREAKERS strings (each is matched against the whole vocabulary)."""
    strings(name, v)
    if len(v) > MAX_BREAKERS:
        raise bad(name, f"at most {MAX_BREAKERS} sequence breakers, got {len(v)}", "invalid_value")
    return v


# llama.cpp's optional samplers and their settings, run by pantheon.engine.sampler (their ranges are checked
# there, a 400 naming the field).
SAMPLERS = {"top_n_sigma": number, "typical_p": number, "xtc_probability": number, "xtc_threshold": number,
            "dynatemp_range": number, "dynatemp_exponent": number, "mirostat": mirostat, "mirostat_tau": number,
            "mirostat_eta": number, "dry_multiplier": number, "dry_base": number, "dry_allowed_length": integer,
            "dry_penalty_last_n": integer, "min_keep": integer}
# Samplers and options we do not run: a value that would change the output is a 400 naming the field;
# the neutral value (what llama-server does when the field is absent) is accepted.
UNSUPPORTED = {"tfs_z": one_only, "lora": null_only}


def private(values):
    """Whether a request shares no kept KV cache: llama-server's cache_prompt false (no reuse of an earlier
    prompt's cache) or vLLM's cache_salt (a prefix cache shared only under one salt; here shared with none)."""
    return values.get("cache_prompt", True) is False or bool(values.get("cache_salt"))
# What a llama-server client sends to any generation route. id_slot and n_keep change nothing here: a
# replica is picked by the router (not a slot), and a prompt that does not fit is refused rather than
# shifted; cache_prompt false makes the request private (see `private`). return_tokens shapes only
# /completion's answer: the OpenAI routes show ids under vLLM's return_token_ids instead.
EXTRAS = dict(UNSUPPORTED, **SAMPLERS, dry_sequence_breakers=breaker_texts, samplers=sampler_order.samplers,
              n_predict=n_predict,
              ignore_eos=boolean,
              cache_prompt=boolean, id_slot=integer, n_keep=integer, grammar=string, json_schema=json_object,
              timings_per_token=boolean, t_max_predict_ms=integer, n_probs=n_probs, n_cmpl=per_prompt,
              return_tokens=boolean, n_indent=indent, post_sampling_probs=boolean)


def compiled_grammar(values):
    """`grammar` (GBNF) or `json_schema` of checked fields, compiled; None when neither is given."""
    if values.get("grammar") and values.get("json_schema") is not None:
        raise bad("grammar", "give grammar or json_schema, not both", "invalid_value")
    field = "grammar" if values.get("grammar") else "json_schema"
    try:
        if values.get("grammar"):
            return grammars.compile_spec(grammars.GBNF, values["grammar"])
        if values.get("json_schema") is not None:
            return grammars.compile_spec(grammars.JSON_SCHEMA, json.dumps(values["json_schema"]))
    except InvalidParameter as exc:
        raise bad(field, str(exc), "invalid_value") from None
    return None


def compiled_guided(guided):
    """vLLM's guided form (field, grammar kind, text), compiled; a bad one is a 400 naming its field."""
    field, kind, text = guided
    try:
        return grammars.compile_spec(kind, text)
    except InvalidParameter as exc:
        raise bad(field, str(exc), "invalid_value") from None


def generation_limit(values, *names):
    """llama-server's order: n_predict wins over the OpenAI names (-1: until the context is full)."""
    return next((values[n] for n in ("n_predict",) + names if values.get(n) is not None), None)


def choice_count(values):
    """n_cmpl or its alias n (1 when neither is given); both, disagreeing, is a 400."""
    n, n_cmpl = values.get("n"), values.get("n_cmpl")
    if n is not None and n_cmpl is not None and n != n_cmpl:
        raise bad("n_cmpl", f"n_cmpl ({n_cmpl}) and its alias n ({n}) disagree; send one", "invalid_value")
    return n_cmpl or n or 1


def predict_limit(values):
    """t_max_predict_ms in seconds, or None: llama-server's 0 and -1 (any value <= 0) leave it off."""
    ms = values.get("t_max_predict_ms") or 0
    return ms / 1000 if ms > 0 else None
