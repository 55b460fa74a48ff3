"""vLLM's extra request fields (its OpenAI server's `extra_body`), restated as the fields Pantheon runs."""

import json

from pantheon.serve.http import truncation
from pantheon.serve.http.request_id import SANE_ID
from pantheon.serve.http.field_types import (MAX_TOP_LOGPROBS, bad, boolean, divisor, integer, known_object, only,
                                             show, string)

MAX_STOP_TOKENS = 64
STRUCTURED_KEYS = ("json", "regex", "choice", "grammar", "json_object")


def stop_token_ids(name, v):
    if not isinstance(v, list) or len(v) > MAX_STOP_TOKENS:
        raise bad(name, f"expected a list of at most {MAX_STOP_TOKENS} token ids", "invalid_type")
    return [integer(f"{name}[{i}]", t, 0) for i, t in enumerate(v)]


def schema(name, v):
    """A JSON schema, as an object or as its JSON text (vLLM takes both)."""
    if not isinstance(v, (dict, str)):
        raise bad(name, "expected a JSON schema object (or its JSON text)", "invalid_type")
    return v


def choices(name, v):
    if not isinstance(v, list) or not v or not all(isinstance(c, str) and c for c in v):
        raise bad(name, "expected a non-empty list of non-empty strings", "invalid_type")
    return v


def allowed_token_ids(name, v):
    """vLLM's: the only tokens the answer may be made of (inside the vocabulary: checked per model)."""
    if not isinstance(v, list) or not v:
        raise bad(name, "expected a non-empty list of token ids", "invalid_type")
    return tuple(integer(f"{name}[{i}]", t, 0) for i, t in enumerate(v))


MAX_BAD_WORDS = 256


def bad_words(name, v):
    """vLLM's: words the answer may not make (each with a character besides spaces; tokenized per model)."""
    if not isinstance(v, list) or len(v) > MAX_BAD_WORDS:
        raise bad(name, f"expected a list of at most {MAX_BAD_WORDS} strings", "invalid_type")
    for i, word in enumerate(v):
        if not string(f"{name}[{i}]", word).strip():
            raise bad(f"{name}[{i}]", "must hold a character besides spaces", "invalid_value")
    return tuple(v)


def request_id(name, v):
    """vLLM's: the id the answer carries after its chatcmpl- or cmpl- (the characters an X-Request-Id may hold)."""
    if not isinstance(v, str) or not SANE_ID.fullmatch(v):
        raise bad(name, f"expected 1 to 128 letters, digits or ._:/+=- characters, got {show(v)}", "invalid_value")
    return v


def cache_salt(name, v):
    """vLLM's: a non-empty string (a salted request shares no kept cache here: llama_fields.private)."""
    if not string(name, v):
        raise bad(name, "must not be empty (leave it out for a request that shares kept caches)", "invalid_value")
    return v


def documents(name, v):
    """vLLM's: documents for a RAG chat template (its `documents` variable), each an object of strings."""
    if not isinstance(v, list):
        raise bad(name, "expected a list of documents, each an object of strings (such as title and text)")
    for i, doc in enumerate(v):
        if not isinstance(doc, dict):
            raise bad(f"{name}[{i}]", f"expected an object of strings, got {show(doc)}")
        for key, text in doc.items():
            string(f"{name}[{i}].{key}", text)
    return v


def prompt_logprobs(name, v):
    """How many alternatives each prompt token's entry shows (0: only the token itself); true and false count
    as 1 and 0, as vLLM's lax integer does. vLLM's -1 (the whole vocabulary) is over its default max_logprobs,
    as here."""
    v = int(v) if isinstance(v, bool) else integer(name, v)
    if not 0 <= v <= MAX_TOP_LOGPROBS:
        raise bad(name, f"must be in 0..{MAX_TOP_LOGPROBS} (the alternatives served per token, vLLM's default "
                  f"max_logprobs), got {show(v)}", "invalid_value")
    return v


def structured_outputs(name, v):
    """vLLM's newer form: {"json" | "regex" | "choice" | "grammar" | "json_object": ...}, one of them."""
    known_object(name, v, set(STRUCTURED_KEYS) | {"disable_any_whitespace", "whitespace_pattern", "backend"})
    given = [k for k in STRUCTURED_KEYS if v.get(k) not in (None, False)]
    if len(given) != 1:
        raise bad(name, f"expected exactly one of {', '.join(STRUCTURED_KEYS)}, got {given or 'none'}",
                  "invalid_value")
    checks = {"json": schema, "regex": string,
              "choice": choices, "grammar": string, "json_object": boolean}
    checks[given[0]](f"{name}.{given[0]}", v[given[0]])
    return v


FIELDS = {
    "repetition_penalty": divisor, "stop_token_ids": stop_token_ids,
    "guided_json": schema, "guided_regex": string,
    "guided_choice": choices, "guided_grammar": string, "structured_outputs": structured_outputs,
    "guided_decoding_backend": string,  # which library compiles the grammar: llguidance here, whatever is named
    "min_tokens": lambda name, v: integer(name, v, 0), "prompt_logprobs": prompt_logprobs,
    "allowed_token_ids": allowed_token_ids, "bad_words": bad_words,
    "include_stop_str_in_output": boolean, "return_tokens_as_token_ids": boolean, "add_special_tokens": boolean,
    "return_token_ids": boolean, "request_id": request_id, "cache_salt": cache_salt,
    "skip_special_tokens": boolean,
    "spaces_between_special_tokens": only(True, "a special token's text is written as it is, with no space added"),
    "use_beam_search": only(False, "beam search is not supported"),
    "length_penalty": only(1.0, "length_penalty applies to beam search, which is not supported"),
    "priority": only(0, "request priorities are not supported (admission is first come, first served)"),
    "truncate_prompt_tokens": truncation.field,
}
CHAT_FIELDS = dict(FIELDS, add_generation_prompt=boolean, continue_final_message=boolean, echo=boolean,
                   documents=documents,
                   add_special_tokens=only(False, "the chat template writes the special tokens (vLLM's default)"))


def restated(values):
    """`values` with vLLM's names turned into ours: repetition_penalty (over the whole context, as vLLM
    applies it) into repeat_penalty, the guided_* fields and structured_outputs into one grammar spec."""
    out = dict(values)
    if "repetition_penalty" in out:
        penalty = out.pop("repetition_penalty")
        if not penalty > 0:
            raise bad("repetition_penalty", f"must be above 0 (1 is off), got {show(penalty)}", "invalid_value")
        if "repeat_penalty" in out and out["repeat_penalty"] != penalty:
            raise bad("repetition_penalty", f"repeat_penalty ({out['repeat_penalty']}) and vLLM's name for it "
                      f"({penalty}) disagree; send one", "invalid_value")
        out.setdefault("repeat_last_n", -1)
        out["repeat_penalty"] = penalty
    limit = out.get("max_completion_tokens", out.get("max_tokens"))
    if limit is not None and out.get("min_tokens", 0) > limit:
        raise bad("min_tokens", f"must not exceed max_tokens ({limit}), got {out['min_tokens']}", "invalid_value")
    out["continue_final"] = _continued(out.pop("add_generation_prompt", None), out.pop("continue_final_message", False))
    if out.get("prompt_logprobs") and out.get("stream"):
        raise bad("prompt_logprobs", "prompt_logprobs are not available when stream=true (as in vLLM)",
                  "invalid_value")
    if out.get("stream"):
        out.pop("prompt_logprobs", None)  # 0 asks for nothing a stream could carry: vLLM drops it too
    if "allowed_token_ids" in out:
        out["allowed_ids"] = out.pop("allowed_token_ids")  # SamplingParams' name
    guided = _guided(out)
    if guided is not None:
        out["guided"] = guided
    return out


def _continued(generation_prompt, continue_final):
    """Whether the reply continues the final assistant message (vLLM's continue_final_message, which wants
    add_generation_prompt false; left out, it is taken as false). A prompt left without the assistant's turn
    is not served."""
    if continue_final and generation_prompt:
        raise bad("continue_final_message", "cannot be true together with add_generation_prompt (the reply "
                  "continues the final assistant message instead of starting a turn), as in vLLM", "invalid_value")
    if generation_prompt is False and not continue_final:
        raise bad("add_generation_prompt", "a prompt always ends with the assistant's turn here: send false only "
                  "with continue_final_message true (got false; send true or omit it)", "unsupported_value")
    return continue_final


def _guided(values):
    """(field, grammar kind, grammar text) of the one guided form given, or None."""
    forms = [(k, values.pop(k)) for k in ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
             if k in values]
    if "structured_outputs" in values:
        spec = values.pop("structured_outputs")
        key = next(k for k in STRUCTURED_KEYS if spec.get(k) not in (None, False))
        forms.append((f"structured_outputs.{key}", {"json_object": {"type": "object"}}.get(key, spec[key])))
    if len(forms) > 1:
        raise bad(forms[1][0], f"give one of {forms[0][0]} and {forms[1][0]}", "invalid_value")
    if not forms:
        return None
    return _spec(*forms[0])


def _spec(field, value):
    kind = field.rsplit(".", 1)[-1].removeprefix("guided_")
    if kind in ("json", "json_object"):
        return field, "json_schema", value if isinstance(value, str) else json.dumps(value)
    if kind == "regex":
        return field, "lark", "start: /" + value.replace("/", "\\/") + "/"
    if kind == "choice":
        return field, "lark", "start: " + " | ".join(json.dumps(c) for c in value)
    return field, "gbnf" if "::=" in value else "lark", value
