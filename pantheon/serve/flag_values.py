"""Flag value parsers: (flag, text) -> value, raising a UsageError that names the flag and the text."""

import ipaddress
import os
import re
from urllib.parse import urlsplit

from pantheon.errors import TemplateError, UsageError
from pantheon.gguf.config import POOLING_TYPES
from pantheon.serve.limits import MAX_DIES_PER_MODEL, MAX_NAME_BYTES, MAX_PATH_BYTES

_DIGITS = re.compile(r"[0-9]{1,12}")
_NEGATIVE = re.compile(r"-[0-9]+")
_PRINTABLE = re.compile(r"[\x21-\x7e]{1,4096}")   # ids and secrets: printable ASCII, no spaces
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
_DIE = re.compile(r"(cpu|cuda)?(0|[1-9][0-9]{0,5})")


def int_in(lo, hi):
    """A parser for a whole decimal number in lo..hi (no sign, no spaces, no hex, no underscores)."""

    def parse(flag, text):
        if _NEGATIVE.fullmatch(text):
            raise UsageError(f"{flag} {text}: must not be negative (expected {lo}..{hi})")
        if not _DIGITS.fullmatch(text):
            raise UsageError(f"{flag} {text!r}: expected a whole number in {lo}..{hi}")
        value = int(text, 10)
        if not lo <= value <= hi:
            raise UsageError(f"{flag} {text}: out of range {lo}..{hi}")
        return value

    return parse


def parse_host(flag, text):
    """An IPv4/IPv6 literal (brackets around IPv6 allowed) or 'localhost'."""
    if text == "localhost":
        return text
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        raise UsageError(f"{flag} {text!r}: not an IPv4/IPv6 address literal or 'localhost'") from None
    return bare


def parse_id(flag, text):
    """A served model id: 1-64 printable ASCII characters, no spaces."""
    if not _PRINTABLE.fullmatch(text):
        raise UsageError(f"{flag} {text!r}: a model id is printable ASCII without spaces, not empty")
    if len(text) > MAX_NAME_BYTES:
        raise UsageError(f"{flag} {text[:20]!r}...: a model id is at most {MAX_NAME_BYTES} characters, "
                         f"got {len(text)}")
    return text


def parse_path(flag, text):
    if not text or "\0" in text:
        raise UsageError(f"{flag} {text!r}: expected a file path")
    return text


def parse_url(flag, text):
    """An http:// URL with a host (the router's base URL; no path beyond '/')."""
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise UsageError(f"{flag} {text!r}: expected http://HOST:PORT (the router's address)")
    return text.rstrip("/")


def parse_address(flag, text):
    """HOST:PORT as the router should dial it (IPv6 in brackets)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not _DIGITS.fullmatch(port) or not 0 < int(port) < 65536 or " " in host:
        raise UsageError(f"{flag} {text!r}: expected HOST:PORT")
    return text


def parse_model_path(flag, text):
    """A model file path that fits the slot table: at most MAX_PATH_BYTES bytes of UTF-8."""
    size = len(parse_path(flag, text).encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        raise UsageError(f"{flag} {text[:40]!r}...: a model path is at most {MAX_PATH_BYTES} bytes, got {size}")
    return text


def parse_dir(flag, text):
    if not os.path.isdir(parse_path(flag, text)):
        raise UsageError(f"{flag} {text!r}: not a directory")
    return text


def parse_secret(flag, text):
    """A key or token; the message never echoes it."""
    if not _PRINTABLE.fullmatch(text):
        raise UsageError(f"{flag}: a key is 1-4096 printable ASCII characters without spaces (value not shown)")
    return text


def parse_origin(flag, text):
    """'*' or a browser origin: scheme://host[:port], nothing after it."""
    if text == "*" or _ORIGIN.fullmatch(text):
        return text
    raise UsageError(f"{flag} {text!r}: expected * or an origin such as https://app.example:8443")


def read_template_file(flag, path):
    """The Jinja text of a chat template file, compiled once here so a broken one refuses to start."""
    try:
        with open(parse_path(flag, path), encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{flag} {path!r}: cannot read: {e}") from None
    return _compiled(f"{flag} {path!r}", source)


def _compiled(where, source):
    from pantheon.text.chat import ChatTemplate

    try:
        ChatTemplate(source)
    except TemplateError as e:
        raise UsageError(f"{where}: not a usable chat template: {e}") from None
    return source


def named_template(value, jinja):
    """A --chat-template value: a named template's text, or (with --jinja) Jinja text compiled to check it."""
    from pantheon.text.named_templates import NAMED

    if value in NAMED:
        return NAMED[value]
    if jinja and ("{{" in value or "{%" in value):
        return _compiled("--chat-template", value)
    raise UsageError(f"--chat-template {value!r}: expected one of {', '.join(sorted(NAMED))}"
                     " (or, with --jinja, a Jinja template)")


def parse_reasoning_format(flag, text):
    if text not in ("auto", "deepseek", "none"):
        raise UsageError(f"{flag} {text!r}: expected auto, deepseek or none")
    return text


def parse_pooling(flag, text):
    """A --pooling value: one of llama.cpp's pooling types (llama-server's flag of the same name)."""
    if text not in POOLING_TYPES:
        raise UsageError(f"{flag} {text!r}: expected one of {', '.join(POOLING_TYPES)}")
    return text


def parse_dies(flag, text):
    """'0,1' / 'cuda0' / 'cpu1' -> canonical names ('cuda0', 'cuda1', 'cpu1'); plain numbers are CUDA."""
    tokens = [t.strip() for t in text.split(",")]
    names = tuple(_die_name(flag, text, t) for t in tokens)
    if len(set(names)) != len(names):
        raise UsageError(f"{flag} {text!r}: a die is named twice")
    if len(names) > MAX_DIES_PER_MODEL:
        raise UsageError(f"{flag} {text!r}: at most {MAX_DIES_PER_MODEL} dies per model, got {len(names)}")
    if len({n.startswith("cpu") for n in names}) > 1:
        raise UsageError(f"{flag} {text!r}: a model runs on CPU dies or on CUDA dies, not both")
    return names


def _die_name(flag, text, token):
    m = _DIE.fullmatch(token)
    if m is None:
        what = "an empty entry" if not token else f"{token!r} is not a die"
        raise UsageError(f"{flag} {text!r}: {what} (write cpuN for a CPU die, N or cudaN for a CUDA die)")
    return f"{m[1] or 'cuda'}{int(m[2])}"


def read_key_file(flag, path):
    """API keys, one a line; blank lines and lines starting with '#' are skipped."""
    keys = read_secret_lines(flag, path)
    if not keys:
        raise UsageError(f"{flag} {path!r}: no keys in the file")
    return keys


def read_secret_lines(flag, path):
    """The keys or tokens of a file, one a line, each checked; blank lines and '#' comments skipped."""
    try:
        with open(parse_path(flag, path), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{flag} {path!r}: cannot read: {e}") from None
    keys = [_file_key(flag, path, n, line.strip()) for n, line in enumerate(lines, 1)]
    return [k for k in keys if k]


def _file_key(flag, path, lineno, line):
    if not line or line.startswith("#"):
        return None
    return parse_secret(f"{flag} {path!r} line {lineno}", line)

