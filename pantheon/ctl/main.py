"""The `pantheon-ctl` command: list, load and unload models of a running pantheon-serve; local fit checks."""

import difflib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from pantheon.ctl import output as fmt
from pantheon.ctl.client import DEFAULT_HTTP_TIMEOUT, AdminClient, AdminError, Refused, Unavailable
from pantheon.ctl.fit import fit_text, fit_report
from pantheon.ctl.ops_cli import DEFAULT_HF_ENDPOINT, HF_ENDPOINT_ENV, OPS_RUNNERS, ops_commands
from pantheon.ctl.values import parse_seconds, parse_size, parse_url, read_token_file
from pantheon.errors import UsageError
from pantheon.serve.flag_values import int_in, parse_dies, parse_id, parse_path, parse_pooling, parse_secret
from pantheon.serve.limits import (DEFAULT_BATCH_SLOTS, DEFAULT_CTX_CAP, DEFAULT_DIES, MAX_BATCH_SLOTS, MAX_CTX_CAP,
                                   MAX_SESSIONS_LIMIT)
from pantheon.serve.settings import HelpRequested, next_option

PROG = "pantheon-ctl"
URL_ENV = "PANTHEON_URL"
DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_LOAD_TIMEOUT = 300   # seconds the server may take to load a model
DEFAULT_UNLOAD_TIMEOUT = 30  # seconds in-flight requests may run on before an unload aborts them
MAX_OP_TIMEOUT = 3600        # the server's bound on both
OP_GRACE = 10                # extra seconds we wait for the server's own answer after its timeout

EXIT_OK = 0                  # success; fit: FITS
EXIT_TIGHT = 1               # fit: FITS-TIGHT
EXIT_USAGE = 2               # bad command line
EXIT_REFUSED = 3             # the server refused (4xx); fit: DOES-NOT-FIT or REFUSED
EXIT_UNAVAILABLE = 4         # cannot reach the server, 5xx, timeout, unreadable answer

FIT_EXIT = {"FITS": EXIT_OK, "FITS-TIGHT": EXIT_TIGHT, "DOES-NOT-FIT": EXIT_REFUSED, "REFUSED": EXIT_REFUSED}

# ---- flags and commands: usage_text() is generated from these tables


@dataclass(frozen=True)
class Flag:
    name: str
    dest: str                    # the Invocation field it sets
    metavar: Optional[str]       # None: a switch
    parse: Optional[Callable]
    help: str
    aliases: tuple = ()


@dataclass(frozen=True)
class Command:
    name: str
    positional: Optional[str]    # the one positional argument's metavar, or None
    dest: Optional[str]
    flags: tuple
    help: str
    parse: Optional[Callable] = None   # the positional's parser [default: by its metavar]


GLOBAL_FLAGS = (
    Flag("--url", "url", "URL", parse_url, f"server address [default: ${URL_ENV}, else {DEFAULT_URL}]"),
    Flag("--token", "token", "TOKEN", parse_secret, "admin bearer token (pantheon-serve --admin-token)"),
    Flag("--token-file", "token_file", "PATH", read_token_file, "read the admin token from a file"),
    Flag("--json", "json", None, None, "print the server's JSON answer (fit: the verdict as JSON)"),
    Flag("--timeout", "http_timeout", "S", parse_seconds,
         f"seconds to wait for an answer [default: {DEFAULT_HTTP_TIMEOUT:g}]"),
    Flag("--help", "help", None, None, "print this help and exit", aliases=("-h",)),
)

_DIES = Flag("--dies", "dies", "A[,B...]", parse_dies, "dies: cpuN, or N / cudaN for CUDA")
_CTX = Flag("--ctx", "ctx", "N", int_in(1, MAX_CTX_CAP), f"per-session context in tokens [default: {DEFAULT_CTX_CAP}]")
_SLOTS = Flag("--slots", "slots", "N", int_in(1, MAX_BATCH_SLOTS),
              f"sequences decoded together [default: {DEFAULT_BATCH_SLOTS}]")
_AVAILABLE = Flag("--available", "available", "BYTES", parse_size,
                  "free RAM to fit in (K/M/G/T suffixes) [default: measured]")
_VRAM = Flag("--vram", "vram", "BYTES", parse_size, "free memory of each CUDA die [default: measured by NVML]")
_LOAD_TIMEOUT = Flag("--timeout", "op_timeout", "S", int_in(1, MAX_OP_TIMEOUT),
                     f"whole seconds the load may take [default: {DEFAULT_LOAD_TIMEOUT}]")
_CONFIG = Flag("--config", "config", "PATH", parse_path, "HF config.json of a .safetensors PATH [default: beside it]")
# the admin load body's per-model fields, named as pantheon-serve's --model flags name them
_POOLING = Flag("--pooling", "pooling", "TYPE", parse_pooling, "embedding pooling: none, mean, cls, last, rank "
                "[default: the GGUF's]")
_SESSIONS = Flag("--max-sessions", "max_sessions", "N", int_in(0, MAX_SESSIONS_LIMIT),
                 "cap on live prefix-cache sessions [default: the server's]")
_CONCURRENT = Flag("--max-concurrent", "max_concurrent", "N", int_in(0, MAX_SESSIONS_LIMIT),
                   "cap on requests generating at once [default: --max-sessions]")
_BUDGET = Flag("--reasoning-budget", "reasoning_budget", "N", int_in(0, MAX_CTX_CAP),
               "force </think> after N thinking tokens [default: 0, unbounded]")
_UNLOAD_TIMEOUT = Flag("--timeout", "op_timeout", "S", int_in(0, MAX_OP_TIMEOUT),
                       f"whole seconds in-flight requests may finish in [default: {DEFAULT_UNLOAD_TIMEOUT}]")

COMMANDS = {c.name: c for c in (
    Command("list", None, None, (), "models and their state (GET /admin/models)"),
    Command("dies", None, None, (), "dies, their workers and memory (GET /admin/dies)"),
    Command("health", None, None, (), "the public health check (GET /health)"),
    Command("load", "PATH", "target", (Flag("--name", "name", "ID", parse_id, "served name [default: file name]"),
                                       _DIES, _CTX, _SLOTS, _LOAD_TIMEOUT, _CONFIG, _POOLING, _SESSIONS,
                                       _CONCURRENT, _BUDGET),
            "load a GGUF file or HF model directory; PATH is opened by the server"),
    Command("unload", "NAME", "target", (_UNLOAD_TIMEOUT,),
            "unload a model; requests still running after --timeout are aborted"),
    Command("fit", "MODEL", "target", (_DIES, _CTX, _SLOTS, _CONFIG, _AVAILABLE, _VRAM),
            "will MODEL fit? local estimate, no server"),
    *ops_commands(Command, Flag, parse_size, _DIES, _CTX, _SLOTS, _AVAILABLE, _VRAM),
)}


@dataclass(frozen=True)
class Invocation:
    """One validated pantheon-ctl command line; None means "not given"."""

    command: str
    target: Optional[str] = None
    url: str = DEFAULT_URL
    token: Optional[str] = None
    json: bool = False
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    name: Optional[str] = None
    dies: Optional[tuple] = None
    ctx: Optional[int] = None
    slots: Optional[int] = None
    op_timeout: Optional[int] = None
    available: Optional[int] = None
    vram: Optional[int] = None
    config: Optional[str] = None
    models_dir: Optional[str] = None
    recommend: bool = False
    yes: bool = False
    force: bool = False
    load: bool = False
    full: bool = False
    stress: bool = False
    streams: Optional[int] = None
    prompt_tokens: Optional[int] = None
    gen_tokens: Optional[int] = None
    chart: Optional[str] = None
    record: bool = False
    hf_endpoint: str = DEFAULT_HF_ENDPOINT
    pooling: Optional[str] = None
    max_sessions: Optional[int] = None
    max_concurrent: Optional[int] = None
    reasoning_budget: Optional[int] = None


def parse_ctl_args(argv, environ=os.environ):
    """Invocation from `pantheon-ctl` arguments (without the program name).

    Global flags go before or after the command; after `load`/`unload`, `--timeout` is theirs (the
    operation's timeout), before the command it is the HTTP timeout. Raises UsageError naming the
    offending flag, HelpRequested for -h/--help. PANTHEON_URL is read only when --url is not given.
    """
    tokens, values, command, positionals, i = list(argv), {}, None, [], 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--" and command is not None:
            positionals += tokens[i + 1:]
            break
        if not token.startswith("-") or token == "-":
            command, i = _positional(command, positionals, token), i + 1
            continue
        flag, value, i = next_option(tokens, i, lambda name, _token: _lookup(name, command))
        _set(values, flag, value)
    return _finish(command, positionals, values, environ)


def _positional(command, positionals, token):
    if command is not None:
        positionals.append(token)
        return command
    if token not in COMMANDS:
        raise UsageError(f"unknown command {token!r}{_hint(token, COMMANDS)} (commands: {', '.join(COMMANDS)})")
    return COMMANDS[token]


def _lookup(name, command):
    # a command's own flag shadows the global one of the same name (load's --timeout)
    known = {n: f for f in (*GLOBAL_FLAGS, *(command.flags if command else ())) for n in (f.name, *f.aliases)}
    if name in known:
        return known[name]
    where = f" for {command.name}" if command else " before the command"
    if command is None and any(name == f.name for c in COMMANDS.values() for f in c.flags):
        raise UsageError(f"{name}{where}: it belongs after the command it applies to")
    raise UsageError(f"unknown flag {name!r}{where}{_hint(name, known)}")


def _hint(word, choices):
    near = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {near[0]}?" if near else ""


def _set(values, flag, value):
    if flag.dest == "help":
        raise HelpRequested()
    if flag.dest in values:
        raise UsageError(f"{flag.name} given twice")
    values[flag.dest] = True if flag.metavar is None else flag.parse(flag.name, value)


def _finish(command, positionals, values, environ):
    if command is None:
        raise UsageError(f"missing command: one of {', '.join(COMMANDS)}")
    _check_positionals(command, positionals)
    if "token" in values and "token_file" in values:
        raise UsageError("--token and --token-file: give one of them")
    token = values.pop("token_file", None) or values.pop("token", None)
    url = values.pop("url", None) or url_from_env(environ)
    target = _target(command, positionals[0]) if command.positional else None
    return Invocation(command=command.name, target=target, url=url, token=token,
                      hf_endpoint=hf_endpoint_from_env(environ), **values)


def _check_positionals(command, positionals):
    if command.positional is None and positionals:
        raise UsageError(f"{command.name} takes no argument, got {positionals[0]!r}")
    if command.positional and not positionals:
        raise UsageError(f"{command.name}: missing {command.positional}")
    if len(positionals) > 1:
        raise UsageError(f"{command.name}: unexpected argument {positionals[1]!r} (one {command.positional})")


def _target(command, text):
    if command.parse is not None:
        return command.parse(command.positional, text)
    return parse_id(command.positional, text) if command.positional == "NAME" else parse_path(command.positional, text)


def url_from_env(environ=os.environ):
    """$PANTHEON_URL (validated), or the default; the only environment read of pantheon-ctl."""
    raw = environ.get(URL_ENV, "").strip()
    return parse_url(URL_ENV, raw) if raw else DEFAULT_URL


def hf_endpoint_from_env(environ=os.environ):
    """$HF_ENDPOINT (the hub `pull` talks to, as huggingface_hub reads it), or huggingface.co."""
    raw = environ.get(HF_ENDPOINT_ENV, "").strip()
    return parse_url(HF_ENDPOINT_ENV, raw) if raw else DEFAULT_HF_ENDPOINT


# ---- commands: each returns an exit status, writing to `out`


def run_list(inv, client, out):
    payload = _shaped(client.models(), "models")
    out.write(fmt.to_json(payload) if inv.json else fmt.models_table(payload))
    return EXIT_OK


def run_dies(inv, client, out):
    payload = _shaped(client.dies(), "dies")
    out.write(fmt.to_json(payload) if inv.json else fmt.dies_table(payload))
    return EXIT_OK


def run_health(inv, client, out):
    status, payload = client.health()
    out.write(fmt.to_json(payload) if inv.json else fmt.health_table(payload))
    return EXIT_OK if status == 200 else EXIT_UNAVAILABLE


LOAD_EXTRAS = ("pooling", "max_sessions", "max_concurrent", "reasoning_budget")  # sent only when given


def run_load(inv, client, out):
    timeout = DEFAULT_LOAD_TIMEOUT if inv.op_timeout is None else inv.op_timeout
    payload = client.load(inv.target, name=inv.name, dies=inv.dies, ctx_cap=inv.ctx, batch_slots=inv.slots,
                          timeout=timeout, wait=_wait(inv, timeout), config=inv.config,
                          extra={f: getattr(inv, f) for f in LOAD_EXTRAS})
    model = _shaped(payload, "model", dict)["model"]
    out.write(fmt.to_json(payload) if inv.json else fmt.model_line("loaded", model))
    return EXIT_OK


def run_unload(inv, client, out):
    timeout = DEFAULT_UNLOAD_TIMEOUT if inv.op_timeout is None else inv.op_timeout
    payload = _shaped(client.unload(inv.target, timeout=timeout, wait=_wait(inv, timeout)), "model", dict)
    out.write(fmt.to_json(payload) if inv.json else fmt.unloaded_line(payload))
    return EXIT_OK


def _wait(inv, op_timeout):
    """Wait past the server's own timeout, so that its 504 (not our impatience) reports it."""
    return max(inv.http_timeout, op_timeout + OP_GRACE)


def _shaped(payload, key, kind=list):
    if not isinstance(payload.get(key), kind):
        raise Unavailable(f"unexpected answer from the server: no {kind.__name__} {key!r} in {sorted(payload)}")
    return payload


def run_fit(inv, client, out):
    """Local: pantheon.serve.fit's verdict; the exit status is the verdict's (see FIT_EXIT)."""
    report = fit_report(inv.target, inv.dies or DEFAULT_DIES, inv.ctx or DEFAULT_CTX_CAP,
                        inv.slots or DEFAULT_BATCH_SLOTS, available=inv.available, vram=inv.vram, config=inv.config)
    out.write(fmt.to_json(report) if inv.json else fit_text(report))
    return FIT_EXIT[report["verdict"]]


RUNNERS = {"list": run_list, "dies": run_dies, "health": run_health, "load": run_load, "unload": run_unload,
           "fit": run_fit, **OPS_RUNNERS}


# ---- main


def main(argv=None, environ=None, stdout=None, stderr=None):
    """Run one pantheon-ctl command line; returns the exit status (see EXIT_*)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        inv = parse_ctl_args(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
    except HelpRequested:
        out.write(usage_text())
        return EXIT_OK
    except UsageError as e:
        err.write(f"{PROG}: {e}\n(see {PROG} -h)\n")
        return EXIT_USAGE
    return execute(inv, out, err)


def execute(inv, out, err):
    client = AdminClient(inv.url, token=inv.token, timeout=inv.http_timeout)
    try:
        if inv.command in OPS_RUNNERS:    # pull, verify, bench also report on stderr
            return OPS_RUNNERS[inv.command](inv, client, out, err)
        return RUNNERS[inv.command](inv, client, out)
    except UsageError as e:
        err.write(f"{PROG}: {e}\n")
        return EXIT_USAGE
    except AdminError as e:
        return _report(inv, e, out, err)
    except KeyboardInterrupt:
        return 130


def _report(inv, e, out, err):
    """Print the server's error (its JSON too under --json) and a hint for the usual causes."""
    if inv.json and e.body is not None:
        out.write(fmt.to_json(e.body))
    err.write(f"{PROG}: {inv.command}: {e}{_error_hint(inv, e)}\n")
    estimate = e.error.get("estimate")
    if estimate is not None:
        err.write(fmt.numbers_lines(estimate) or f"  estimate: {fmt.cell(estimate)}\n")
    return EXIT_REFUSED if isinstance(e, Refused) else EXIT_UNAVAILABLE


def _error_hint(inv, e):
    if e.status == 401 and inv.token is None:
        return " (no token was sent: give --token or --token-file)"
    return ""


def usage_text():
    """The -h text, generated from the flag and command tables."""
    lines = [f"usage: {PROG} [global flags] COMMAND [ARG] [flags]", "", "Commands:"]
    for c in COMMANDS.values():
        lines.append(f"  {(c.name + ' ' + (c.positional or '')).strip():<22} {c.help}")
        lines += [_flag_row(f, "    ") for f in c.flags]
    lines += ["", "Global flags (before or after the command; after load/unload, --timeout is theirs):"]
    lines += [_flag_row(f, "  ") for f in GLOBAL_FLAGS]
    lines += ["", f"Exit status: {EXIT_OK} success (fit: FITS), {EXIT_TIGHT} fit: FITS-TIGHT, {EXIT_USAGE} usage "
              f"error,", f"  {EXIT_REFUSED} refused by the server (4xx) or fit: DOES-NOT-FIT/REFUSED, pull: a gate stopped it, "
              f"verify: a check failed,", f"  {EXIT_UNAVAILABLE} server (or hub) unreachable, 5xx or timeout."]
    return "\n".join(lines) + "\n"


def _flag_row(f, indent):
    names = ", ".join((*f.aliases, f.name))
    left = f"{indent}{names} {f.metavar}" if f.metavar else f"{indent}{names}"
    return f"{left:<30} {f.help}"
