"""Every `pantheon-serve` flag in one table, parsed once (with the environment's aliases) into frozen config objects."""

import difflib
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from pantheon import demo
from pantheon.errors import UsageError
from pantheon.serve.environment import (BATCH_SLOTS_ENV, REGISTRY_TOKEN_ENV, REGISTRY_URL_ENV, Operations,
                                        batch_slots_from_env, operations_from_env, registry_token_from_env)
from pantheon.serve.flag_values import (int_in, named_template, parse_address, parse_dies, parse_dir, parse_host,
                                        parse_id, parse_model_path, parse_origin, parse_path, parse_pooling,
                                        parse_reasoning_format, parse_secret, parse_url, read_key_file,
                                        read_template_file)
from pantheon.serve.limits import (DEFAULT_BATCH_SLOTS, DEFAULT_BODY_LIMIT, DEFAULT_CONNECTION_LIMIT,
                                   DEFAULT_CPU_DIES, DEFAULT_CTX_CAP, DEFAULT_DIES, DEFAULT_HEADER_TIMEOUT,
                                   DEFAULT_HOST, DEFAULT_HTTP_THREADS, DEFAULT_HTTP_WORKERS, DEFAULT_IDLE_TIMEOUT,
                                   DEFAULT_MAX_SESSIONS, DEFAULT_PORT, DEFAULT_RESPONSES_STORE_MB, MAX_BATCH_SLOTS,
                                   MAX_CPU_DIES, MAX_CTX_CAP, MAX_DIES_PER_MODEL, MAX_HTTP_WORKERS, MAX_MODELS,
                                   MAX_RESPONSES_STORE_MB, MAX_SESSIONS_LIMIT, DEFAULT_SSE_KEEPALIVE)


class HelpRequested(Exception):
    """`-h`/`--help` was given: print `usage_text()` and exit 0. Not an error."""


@dataclass(frozen=True)
class ModelSpec:
    """One `--model` slot with every default resolved to an explicit value."""

    path: str
    name: str
    dies: tuple            # canonical die names: 'cpu0', 'cuda1'
    ctx_cap: int           # tokens per session
    reasoning_budget: int  # 0: unbounded
    max_sessions: int
    max_concurrent: int
    chat_template: Optional[str] = None  # Jinja source overriding the GGUF's (--chat-template[-file])
    config: str = ""       # config.json of an HF model given as a .safetensors file ('' otherwise)
    pooling: str = ""      # --pooling: a pooling type overriding the GGUF's ('' keeps the file's)


def context_size(ctx_cap, n_ctx_train):
    """Tokens per sequence: the --ctx-cap (0 = DEFAULT_CTX_CAP), never beyond what the model was trained for."""
    return min(ctx_cap or DEFAULT_CTX_CAP, n_ctx_train)


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP front allows a client: sockets, threads, timeouts, body bytes."""

    connection_limit: int = DEFAULT_CONNECTION_LIMIT
    threads: int = DEFAULT_HTTP_THREADS
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT
    header_timeout: int = DEFAULT_HEADER_TIMEOUT
    body_limit: int = DEFAULT_BODY_LIMIT
    sse_keepalive: int = DEFAULT_SSE_KEEPALIVE  # seconds; 0: a silent stream sends nothing


@dataclass(frozen=True)
class ServeConfig:
    """Everything `pantheon-serve` was asked to do, validated."""

    models: tuple
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    http_workers: int = DEFAULT_HTTP_WORKERS
    batch_slots: int = DEFAULT_BATCH_SLOTS
    cpu_dies: int = DEFAULT_CPU_DIES
    quantize: bool = False
    api_keys: tuple = ()
    admin_token: Optional[str] = None
    models_dir: Optional[str] = None
    ops: "Operations" = None
    cors_origins: tuple = ()
    reasoning_format: str = "auto"
    prefill_assistant: bool = True  # a chat's final assistant message starts the reply (llama-server's default)
    registry: Optional["Registry"] = None  # where to register with a `pantheon router`; None: standalone
    http: HttpLimits = HttpLimits()
    responses_store_mb: int = DEFAULT_RESPONSES_STORE_MB  # 0: the Responses API stores nothing


# `pantheon router` sends `X-Pantheon-Stream-End: close` to instances: a front then ends a stream by
# closing the connection instead of with a last chunk, so that the proxy sees an instance's death as
# an early end of input and can append an error event (pantheon/router/stream_guard.lua)
STREAM_END_HEADER = "X-Pantheon-Stream-End"
# the id a /v1/responses answer is stored under (the router pins it to the instance that stores it, so that
# a previous_response_id reaches that instance)
RESPONSE_ID_HEADER = "X-Pantheon-Response-Id"


@dataclass(frozen=True)
class Registry:
    """`--registry` and friends: the router this instance registers its models with."""

    url: str                 # the router's base URL, e.g. http://10.0.0.5:8000
    token: Optional[str]     # the router's shared registry token
    advertise: str           # host:port the router's proxy reaches this instance at (resolved in the front)


# ---- the flag table: one row per flag; usage_text() and the docs test read it


@dataclass(frozen=True)
class Flag:
    name: str
    scope: str                   # 'global' or 'model' (binds to the most recent --model)
    metavar: Optional[str]       # None: a switch that takes no value
    parse: Optional[Callable]
    default: str
    help: str
    aliases: tuple = ()


FLAGS = (
    Flag("--model", "global", "PATH", parse_model_path, "bundled demo model",
         f"GGUF file or HF model directory to serve; repeatable, each starts a new model slot (at most {MAX_MODELS})"),
    Flag("--config", "model", "PATH", parse_model_path, "config.json beside the weights",
         "HF config.json of a --model given as a .safetensors file (or index) elsewhere"),
    Flag("--name", "model", "ID", parse_id, "basename of PATH", "served model id (the request's `model` field)"),
    Flag("--dies", "model", "A[,B...]", parse_dies, "cpu0",
         f"dies to run on: cpuN, or N / cudaN for CUDA ordinals (at most {MAX_DIES_PER_MODEL})"),
    Flag("--ctx-cap", "model", "N", int_in(0, MAX_CTX_CAP), f"0 = {DEFAULT_CTX_CAP}",
         "per-session context cap in tokens; longer prompts are refused"),
    Flag("--reasoning-budget", "model", "N", int_in(0, MAX_CTX_CAP), "0 = unbounded",
         "force </think> after N thinking tokens"),
    Flag("--chat-template", "model", "NAME", parse_path, "the GGUF's",
         "chat template by name (chatml, llama3, llama2, mistral, gemma, phi3, zephyr); with --jinja any Jinja text"),
    Flag("--chat-template-file", "model", "PATH", read_template_file, "unset", "chat template (Jinja) read from a file"),
    Flag("--pooling", "model", "TYPE", parse_pooling, "the GGUF's",
         "embedding pooling: none (per-token, /embedding only), mean, cls, last, rank (a reranker's head)"),
    Flag("--max-sessions", "model", "N", int_in(0, MAX_SESSIONS_LIMIT), f"0 = {DEFAULT_MAX_SESSIONS}",
         "cap on live prefix-cache sessions"),
    Flag("--max-concurrent", "model", "N", int_in(0, MAX_SESSIONS_LIMIT), "0 = resolved --max-sessions",
         "cap on requests generating at once; the rest queue"),
    Flag("--jinja", "global", None, None, "on", "templates are always Jinja; accepted for llama-server parity"),
    Flag("--host", "global", "ADDR", parse_host, DEFAULT_HOST, "bind address: IPv4/IPv6 literal or localhost"),
    Flag("--port", "global", "N", int_in(0, 65535), str(DEFAULT_PORT), "TCP port (0: a free port, logged)"),
    Flag("--served-name", "global", "ID", parse_id, "unset", "model 0's id when it has no --name"),
    Flag("--quantize", "global", None, None, "off", "Q8_0-quantize weights at load"),
    Flag("--http-workers", "global", "N", int_in(1, MAX_HTTP_WORKERS), str(DEFAULT_HTTP_WORKERS),
         "HTTP front processes"),
    Flag("--connection-limit", "global", "N", int_in(16, 60000), str(DEFAULT_CONNECTION_LIMIT),
         "open client sockets per HTTP front; beyond it the front stops accepting until one closes"),
    Flag("--http-threads", "global", "N", int_in(2, 1024), str(DEFAULT_HTTP_THREADS),
         "requests in progress per HTTP front (each open stream holds one)"),
    Flag("--idle-timeout", "global", "S", int_in(1, 86400), str(DEFAULT_IDLE_TIMEOUT),
         "seconds a client socket may sit idle between requests before it is closed"),
    Flag("--header-timeout", "global", "S", int_in(1, 3600), str(DEFAULT_HEADER_TIMEOUT),
         "seconds a client has to send a request's headers once it started (slow clients are cut)"),
    Flag("--body-limit", "global", "BYTES", int_in(1024, 1 << 30), str(DEFAULT_BODY_LIMIT),
         "largest request body; a larger Content-Length is refused (413) before the body is read"),
    Flag("--sse-keepalive", "global", "S", int_in(0, 3600), str(DEFAULT_SSE_KEEPALIVE),
         "seconds a stream may stay silent (queued, prefilling) before an SSE comment line keeps proxies from "
         "cutting it; 0: never"),
    Flag("--batch-slots", "global", "N", int_in(1, MAX_BATCH_SLOTS), str(DEFAULT_BATCH_SLOTS),
         f"sequences decoded together per model (overrides {BATCH_SLOTS_ENV})"),
    Flag("--cpu-dies", "global", "N", int_in(1, MAX_CPU_DIES), str(DEFAULT_CPU_DIES),
         "split this process's cores into N CPU dies cpu0..cpuN-1"),
    Flag("--api-key", "global", "KEY", parse_secret, "none", "accepted bearer key; repeatable"),
    Flag("--api-key-file", "global", "PATH", read_key_file, "none", "file of keys, one a line, '#' comments"),
    Flag("--admin-token", "global", "TOKEN", parse_secret, "none", "bearer token for admin routes"),
    Flag("--cors-origin", "global", "ORIGIN", parse_origin, "none",
         "origin allowed cross-origin (scheme://host[:port], or * for any); repeatable"),
    Flag("--reasoning-format", "global", "FMT", parse_reasoning_format, "auto",
         "auto or deepseek: <think> text goes to reasoning_content; none: it stays in content"),
    Flag("--no-prefill-assistant", "global", None, None, "off",
         "a chat's final assistant message is a finished turn, not the start of the reply (llama-server's flag)"),
    Flag("--responses-store", "global", "MB", int_in(0, MAX_RESPONSES_STORE_MB), str(DEFAULT_RESPONSES_STORE_MB),
         "disk for stored Responses (store: true, previous_response_id), least recently used evicted; 0: none"),
    Flag("--models-dir", "global", "DIR", parse_dir, "none", "directory of models that may be loaded"),
    Flag("--registry", "global", "URL", parse_url, "unset (PANTHEON_REGISTRY_URL)",
         "register every served model with the `pantheon router` at URL and heartbeat"),
    Flag("--registry-token", "global", "TOKEN", parse_secret, "unset (PANTHEON_REGISTRY_TOKEN)",
         "the router's shared registry token"),
    Flag("--advertise", "global", "HOST:PORT", parse_address, "--host:port",
         "address the router reaches this instance at"),
    Flag("--vocab", "global", "PATH", None, "unset", "RWKV World vocabulary: not supported yet"),
    Flag("--help", "global", None, None, "", "print this help and exit", aliases=("-h",)),
)

_BY_NAME = {n: f for f in FLAGS for n in (f.name, *f.aliases)}


# ---- the argv walker


@dataclass
class _Draft:
    models: list = field(default_factory=list)   # one dict per --model: flag name -> parsed value
    opts: dict = field(default_factory=dict)     # global flag name -> parsed value
    api_keys: list = field(default_factory=list)
    cors_origins: list = field(default_factory=list)


def parse_serve_args(argv, environ=os.environ):
    """ServeConfig from `pantheon-serve` arguments (without the program name).

    Raises UsageError naming the offending flag, HelpRequested for -h/--help. Without --model the
    bundled demo model is served. --batch-slots wins over QWEN35_BATCH_SLOTS, which is then not read.
    """
    draft, tokens, i = _Draft(), list(argv), 0
    while i < len(tokens):
        flag, value, i = next_option(tokens, i, _lookup)
        _apply(draft, flag, value)
    return _finish(draft, environ)


def next_option(tokens, i, lookup):
    """(flag, value or None, index of the next token); accepts `--flag value` and `--flag=value`.
    lookup(name, token) -> Flag or UsageError. Shared by pantheon-serve's and pantheon-ctl's parsers."""
    token = tokens[i]
    name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
    flag = lookup(name, token)
    if flag.metavar is None:
        if eq:
            raise UsageError(f"{flag.name} takes no value, got {token!r}")
        return flag, None, i + 1
    if eq:
        return flag, inline, i + 1
    if i + 1 >= len(tokens):
        raise UsageError(f"{name}: missing value {flag.metavar}")
    if tokens[i + 1].startswith("--"):
        raise UsageError(f"{name}: missing value {flag.metavar} (got flag {tokens[i + 1]!r})")
    return flag, tokens[i + 1], i + 2


def _lookup(name, token):
    if not token.startswith("-") or token == "-":
        raise UsageError(f"unexpected argument {token!r} (model paths follow --model)")
    flag = _BY_NAME.get(name)
    if flag is None:
        near = difflib.get_close_matches(name, list(_BY_NAME), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise UsageError(f"unknown flag {name!r}{hint}")
    return flag


def _apply(draft, flag, value):
    special = _SPECIAL.get(flag.name)
    if special is not None:
        special(draft, flag, value)
        return
    target = _current_model(draft, flag) if flag.scope == "model" else draft.opts
    if flag.name in target:
        raise UsageError(f"{flag.name} given twice{_for_model(draft, flag)}")
    target[flag.name] = True if flag.metavar is None else flag.parse(flag.name, value)


def _current_model(draft, flag):
    if not draft.models:
        raise UsageError(f"{flag.name} before any --model: per-model flags bind to the most recent --model")
    return draft.models[-1]


def _for_model(draft, flag):
    return f" for --model {draft.models[-1]['--model']}" if flag.scope == "model" else ""


def _add_model(draft, flag, value):
    if len(draft.models) == MAX_MODELS:
        raise UsageError(f"--model {value}: at most {MAX_MODELS} models")
    draft.models.append({"--model": flag.parse(flag.name, value)})


def _add_key(draft, flag, value):
    draft.api_keys.append(flag.parse(flag.name, value))


def _add_key_file(draft, flag, value):
    draft.api_keys.extend(flag.parse(flag.name, value))


def _add_origin(draft, flag, value):
    draft.cors_origins.append(flag.parse(flag.name, value))


def _refuse(draft, flag, value):
    raise UsageError(f"{flag.name}: not supported yet ({flag.help.split(':')[0]}); serve a GGUF model")


def _help(draft, flag, value):
    raise HelpRequested()


_SPECIAL = {"--model": _add_model, "--api-key": _add_key, "--api-key-file": _add_key_file,
            "--cors-origin": _add_origin,
            "--vocab": _refuse, "--help": _help}


# ---- resolution into frozen objects


def _finish(draft, environ):
    opts = draft.opts
    models = draft.models or [{"--model": _demo_path()}]
    served = opts.get("--served-name")
    specs = tuple(_model_spec(m, served if i == 0 else None, opts.get("--jinja", False))
                  for i, m in enumerate(models))
    return ServeConfig(
        models=specs, host=opts.get("--host", DEFAULT_HOST), port=opts.get("--port", DEFAULT_PORT),
        http_workers=opts.get("--http-workers", DEFAULT_HTTP_WORKERS),
        batch_slots=opts.get("--batch-slots") or batch_slots_from_env(environ),
        cpu_dies=opts.get("--cpu-dies", DEFAULT_CPU_DIES), quantize=opts.get("--quantize", False),
        api_keys=tuple(dict.fromkeys(draft.api_keys)), admin_token=opts.get("--admin-token"),
        models_dir=opts.get("--models-dir"), ops=operations_from_env(environ),
        cors_origins=tuple(dict.fromkeys(draft.cors_origins)),
        reasoning_format=opts.get("--reasoning-format", "auto"),
        prefill_assistant=not opts.get("--no-prefill-assistant", False), registry=_registry(opts, environ),
        http=_http_limits(opts), responses_store_mb=opts.get("--responses-store", DEFAULT_RESPONSES_STORE_MB))


def _registry(opts, environ):
    url = opts.get("--registry")
    if url is None and environ.get(REGISTRY_URL_ENV, "").strip():
        url = parse_url(REGISTRY_URL_ENV, environ[REGISTRY_URL_ENV].strip())
    if url is None:
        for flag in ("--registry-token", "--advertise"):
            if flag in opts:
                raise UsageError(f"{flag} without --registry (or {REGISTRY_URL_ENV})")
        return None
    token = opts.get("--registry-token") or registry_token_from_env(environ)
    return Registry(url, token, opts.get("--advertise", ""))


def _http_limits(opts):
    return HttpLimits(connection_limit=opts.get("--connection-limit", DEFAULT_CONNECTION_LIMIT),
                      threads=opts.get("--http-threads", DEFAULT_HTTP_THREADS),
                      idle_timeout=opts.get("--idle-timeout", DEFAULT_IDLE_TIMEOUT),
                      header_timeout=opts.get("--header-timeout", DEFAULT_HEADER_TIMEOUT),
                      body_limit=opts.get("--body-limit", DEFAULT_BODY_LIMIT),
                      sse_keepalive=opts.get("--sse-keepalive", DEFAULT_SSE_KEEPALIVE))


def _demo_path():
    return str(demo.demo_model_path())


def parse_flag(name, text, label=None):
    """One flag's value parsed as on the command line; errors name `label` (default: the flag)."""
    return _BY_NAME[name].parse(label or name, text)


def model_spec(values):
    """The ModelSpec of parsed per-model values ({"--model": path, "--name": id, ...}), every default
    resolved exactly as for a `--model` on the command line."""
    return _model_spec(values, None)


def batch_slots_of(spec, batch_slots):
    """Sequences a model's engine decodes together: --batch-slots, never more than it runs at once."""
    return min(batch_slots, spec.max_concurrent)


def _model_spec(m, served_name, jinja=False):
    path = m["--model"]
    if "--chat-template" in m and "--chat-template-file" in m:
        raise UsageError(f"--model {path}: give --chat-template or --chat-template-file, not both")
    template = m.get("--chat-template-file")
    if "--chat-template" in m:
        template = named_template(m["--chat-template"], jinja)
    sessions = m.get("--max-sessions") or DEFAULT_MAX_SESSIONS
    return ModelSpec(path=path, name=m.get("--name") or served_name or _basename(path),
                     dies=m.get("--dies", DEFAULT_DIES), ctx_cap=m.get("--ctx-cap") or DEFAULT_CTX_CAP,
                     reasoning_budget=m.get("--reasoning-budget", 0), max_sessions=sessions,
                     max_concurrent=m.get("--max-concurrent") or sessions, chat_template=template,
                     config=m.get("--config", ""), pooling=m.get("--pooling", ""))


def _basename(path):
    name = os.path.basename(path.rstrip("/"))
    if not name:
        raise UsageError(f"--model {path!r}: no file name to serve it under; give --name")
    return parse_id("--name (from the --model file name)", name)


# ---- help


def usage_text():
    """The -h text, generated from FLAGS."""
    lines = ["usage: pantheon-serve [--model PATH [per-model flags]]... [global flags]", "",
             "Per-model flags bind to the most recent --model:"]
    lines += [_usage_row(f) for f in FLAGS if f.scope == "model"]
    lines += ["", "Global flags:"]
    lines += [_usage_row(f) for f in FLAGS if f.scope == "global"]
    lines += ["", "Environment:",
              f"  {BATCH_SLOTS_ENV}=N  alias of --batch-slots (a number 1..{MAX_BATCH_SLOTS}); the flag wins",
              "  CUDA_VISIBLE_DEVICES  CUDA die numbers count the devices it leaves visible",
              f"  {REGISTRY_URL_ENV}=URL  alias of --registry; the flag wins",
              f"  {REGISTRY_TOKEN_ENV}=TOKEN  alias of --registry-token (also read by `pantheon router`)"]
    return "\n".join(lines) + "\n"


def _usage_row(f):
    names = ", ".join((*f.aliases, f.name))
    left = f"  {names} {f.metavar}" if f.metavar else f"  {names}"
    row = f"{left:<30} {f.help}"
    if not f.default:
        return row
    default = f"[default: {f.default}]"
    return f"{row} {default}" if len(row) + len(default) < 100 else f"{row}\n{'':<31}{default}"
