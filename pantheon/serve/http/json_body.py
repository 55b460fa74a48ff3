"""A request body read as bounded, strict JSON: a size limit, no NaN literals, a nesting limit."""

import json

from pantheon.serve.http.errors import RequestError

MAX_DEPTH = 32                     # JSON nesting; every field we accept is far shallower


def read_json(req, limit):
    """The decoded JSON body of `req`, at most `limit` bytes; 400 or 413 naming what is wrong."""
    length = req.content_length
    if length is not None and length > limit:
        raise RequestError(f"request body of {length} bytes exceeds the {limit}-byte limit",
                           code="request_too_large", status=413)
    raw = req.bounded_stream.read(limit + 1)
    if len(raw) > limit:
        raise RequestError(f"request body exceeds the {limit}-byte limit", code="request_too_large", status=413)
    return parse_json(raw)


def parse_json(raw):
    """Strict JSON (no NaN/Infinity literals) nested at most MAX_DEPTH deep; else a 400."""
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        body = None  # nested past the interpreter's own limit: certainly past ours
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON: {str(exc)[:200]}", code="invalid_json") from None
    if body is None and raw.strip() != b"null" or not _shallow(body):
        raise RequestError(f"the request body nests deeper than {MAX_DEPTH} levels", code="invalid_json")
    return body


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _shallow(body):
    """True when no container nests deeper than MAX_DEPTH; iterative, so depth itself cannot hurt."""
    level, depth = [body], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return False
        nested = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
            nested.extend(c for c in children if isinstance(c, (dict, list)))
        level = nested
    return True
