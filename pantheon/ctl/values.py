"""pantheon-ctl's flag values: (flag, text) -> value, or a UsageError naming the flag and the text."""

import re
import urllib.parse

from pantheon.errors import UsageError
from pantheon.serve.flag_values import read_secret_lines

MAX_SECONDS = 86400

_SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")
_SIZE = re.compile(r"([0-9]{1,19})([KMGT]?)(i?B)?", re.IGNORECASE)


def parse_seconds(flag, text):
    """Seconds > 0 (decimals allowed), an int when whole."""
    if text.startswith("-"):
        raise UsageError(f"{flag} {text}: must not be negative (expected seconds > 0)")
    if not _SECONDS.fullmatch(text):
        raise UsageError(f"{flag} {text!r}: expected seconds, a number > 0")
    value = float(text) if "." in text else int(text)
    if not 0 < value <= MAX_SECONDS:
        raise UsageError(f"{flag} {text}: out of range (0, {MAX_SECONDS}] seconds")
    return value


def parse_size(flag, text):
    """Bytes: a whole number with an optional binary suffix K, M, G, T (also KiB/KB...: all powers of 1024)."""
    m = _SIZE.fullmatch(text)
    if m is None or (m[3] and m[3].lower() == "ib" and not m[2]):
        raise UsageError(f"{flag} {text!r}: expected bytes, a whole number with an optional K/M/G/T suffix")
    value = int(m[1]) << (10 * " KMGT".index(m[2].upper() or " "))
    if value == 0:
        raise UsageError(f"{flag} {text}: must be more than 0 bytes")
    return value


def parse_url(flag, text):
    """http(s)://host[:port][/prefix] without query, fragment or credentials; no trailing slash."""
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port
    except ValueError as e:
        raise UsageError(f"{flag} {text!r}: not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{flag} {text!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"{flag} {text!r}: no query, fragment or user:password in the URL")
    return text.rstrip("/")


def read_token_file(flag, path):
    """The one token in a file; blank lines and lines starting with '#' are skipped."""
    tokens = read_secret_lines(flag, path)
    if len(tokens) != 1:
        raise UsageError(f"{flag} {path!r}: expected one token in the file, found {len(tokens)}")
    return tokens[0]
