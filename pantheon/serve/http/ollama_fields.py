"""Ollama's request bodies checked under their own field names and restated as the OpenAI chat fields."""

import json
import re

from pantheon.serve.http import validate
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad, boolean, integer, known_object, number, show, string

# options that shape what is generated: the Ollama name and the chat (or llama-server) field it sets
SAMPLING = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
            "num_predict": "n_predict", "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
            "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "stop": "stop",
            "typical_p": "typical_p", "mirostat": "mirostat", "mirostat_tau": "mirostat_tau",
            "mirostat_eta": "mirostat_eta", "tfs_z": "tfs_z"}
# options that say how a runner is built (context, GPU layers, threads, mmap...): the server's flags fix
# these for every client, so they are type-checked and change nothing (docs/http-api.md says so)
RUNNER = {"num_ctx": integer, "num_batch": integer, "num_gpu": integer, "main_gpu": integer, "num_thread": integer,
          "num_keep": integer, "numa": boolean, "low_vram": boolean, "f16_kv": boolean, "logits_all": boolean,
          "vocab_only": boolean, "use_mmap": boolean, "use_mlock": boolean, "embedding_only": boolean,
          "penalize_newline": boolean}
_DURATION = re.compile(r"-?(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+")
MESSAGE_KEYS = {"role", "content", "images", "tool_calls", "tool_name", "thinking"}
THINK_LEVELS = ("low", "medium", "high")  # gpt-oss's reasoning levels; any of them turns thinking on


def keep_alive(name, v):
    """A number of seconds or a Go duration ("5m", "1h30m", "-1"): checked; models stay until an admin
    unloads them, so it changes nothing else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return number(name, v)
    if not isinstance(v, str) or not (_DURATION.fullmatch(v) or re.fullmatch(r"-?\d+", v)):
        raise bad(name, f"expected seconds or a duration such as \"5m\", got {show(v)}")
    return v


def think(name, v):
    if isinstance(v, bool) or v in THINK_LEVELS:
        return v
    raise bad(name, f"expected true, false or one of {', '.join(THINK_LEVELS)}, got {show(v)}", "invalid_value")


def options(name, v):
    """{chat field: value} of an `options` object; runner options checked and dropped."""
    if not isinstance(v, dict):
        raise bad(name, "expected an object")
    out = {}
    for key, value in v.items():
        if key in RUNNER:
            RUNNER[key](f"{name}.{key}", value)
        elif key not in SAMPLING:
            raise bad(f"{name}.{key}", "unknown option", "unknown_field")
        elif value is not None:
            out[SAMPLING[key]] = -1 if key == "num_predict" and value == -2 else value  # -2: fill the context
    return out


def response_format(name, v):
    """`format`: "json" (any JSON value the grammar allows: an object), a JSON schema, or "" for text."""
    if v == "":
        return None
    if v == "json":
        return {"type": "json_object"}
    if isinstance(v, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": v}}
    raise bad(name, f"expected \"json\" or a JSON schema object, got {show(v)}", "invalid_value")


def no_images(name, v):
    if not isinstance(v, list):
        raise bad(name, "expected a list of base64 images")
    if v:
        raise bad(name, "images are not supported: this server runs text models", "unsupported_value")
    return v


def messages(name, v):
    """Ollama messages as OpenAI ones: tool calls' argument objects become JSON text, tool_name the name."""
    if not isinstance(v, list):
        raise bad(name, "expected a list of messages")
    return [_message(f"{name}[{i}]", m) for i, m in enumerate(v)]


def _message(where, m):
    known_object(where, m, MESSAGE_KEYS)
    if m.get("images") is not None:
        no_images(f"{where}.images", m["images"])
    out = {"role": m.get("role"), "content": m.get("content") or ""}
    for key, target in (("tool_name", "name"), ("thinking", "reasoning_content")):
        if m.get(key) is not None:
            out[target] = string(f"{where}.{key}", m[key])
    if m.get("tool_calls"):
        out["tool_calls"] = _calls(f"{where}.tool_calls", m["tool_calls"])
    return out


def _calls(where, calls):
    if not isinstance(calls, list):
        raise bad(where, "expected a list of tool calls")
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"{where}[{i}].function", "expected an object with a string \"name\"", "invalid_value")
        args = fn.get("arguments", {})
        if not isinstance(args, (dict, str)):
            raise bad(f"{where}[{i}].function.arguments", "expected an object")
        out.append({"id": call.get("id") or f"call_{i}", "type": "function",
                    "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out


def parsed(model, chat_messages, values, stream):
    """validate.Parsed of the chat request these checked Ollama fields stand for; a refusal names the
    Ollama field (options.num_predict, not n_predict)."""
    body = {"model": model, "messages": chat_messages or [{"role": "user", "content": ""}], "stream": stream,
            **values.get("options", {})}
    if values.get("format"):
        body["response_format"] = values["format"]
    if values.get("tools"):
        body["tools"] = values["tools"]
    if values.get("think") is False:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    if values.get("logprobs"):
        body.update(logprobs=True, top_logprobs=values.get("top_logprobs", 0))
    try:
        return validate.check(body, validate.CHAT, ())
    except RequestError as exc:
        raise _renamed(exc) from None


def _renamed(exc):
    source = {v: f"options.{k}" for k, v in SAMPLING.items()}.get(exc.param)
    if source is None:
        return exc
    return RequestError(source + str(exc)[len(exc.param):], param=source, code=exc.code, status=exc.status)


COMMON = {"model": string, "stream": boolean, "options": options, "keep_alive": keep_alive, "format": response_format,
          "think": think, "logprobs": boolean, "top_logprobs": validate.top_logprobs}
CHAT = dict(COMMON, messages=messages, tools=validate.tools)
GENERATE = dict(COMMON, prompt=string, suffix=string, system=string, template=string, raw=boolean, images=no_images,
                context=validate.token_ids)
EMBED = {"model": string, "input": lambda n, v: [v] if isinstance(v, str) else _texts(n, v), "truncate": boolean,
         "options": options, "keep_alive": keep_alive, "dimensions": lambda n, v: integer(n, v, 1)}
EMBEDDINGS = {"model": string, "prompt": string, "options": options, "keep_alive": keep_alive}
SHOW = {"model": string, "name": string, "verbose": boolean}


def _texts(name, v):
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise bad(name, "expected a string or a list of strings")
    return v
