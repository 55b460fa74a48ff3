"""GET /v1/models in Anthropic's shape, for a client that sends `anthropic-version` (every Anthropic SDK does)."""

import datetime
import re

from pantheon.serve.http.field_types import bad, show

VERSION_HEADER = "anthropic-version"
DEFAULT_LIMIT, MAX_LIMIT = 20, 1000  # Anthropic's page size default and bound
_LIMIT = re.compile(r"[0-9]{1,4}")  # ASCII digits only ("²".isdigit() is true)


def asks(req):
    """Whether the request comes from an Anthropic client (it names the API version it speaks)."""
    return req.get_header(VERSION_HEADER) is not None


def entry(info):
    """One model as Anthropic's ModelInfo: type, id, display_name, created_at (RFC 3339)."""
    created = datetime.datetime.fromtimestamp(info.created, datetime.timezone.utc)
    return {"type": "model", "id": info.name, "display_name": info.name,
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ")}


def page(infos, params):
    """Anthropic's list page of `infos`: query `limit` (1-1000, default 20), `after_id` or `before_id`."""
    entries = [entry(i) for i in infos]
    ids = [e["id"] for e in entries]
    limit = _limit(params.get("limit", str(DEFAULT_LIMIT)))
    after, before = params.get("after_id"), params.get("before_id")
    if after is not None and before is not None:
        raise bad("before_id", "give after_id or before_id, not both", "invalid_value")
    if after is not None:
        entries = entries[_position("after_id", after, ids) + 1:]
        chosen = entries[:limit]
    elif before is not None:
        entries = entries[:_position("before_id", before, ids)]
        chosen = entries[-limit:]
    else:
        chosen = entries[:limit]
    return {"data": chosen, "has_more": len(chosen) < len(entries),
            "first_id": chosen[0]["id"] if chosen else None, "last_id": chosen[-1]["id"] if chosen else None}


def _limit(value):
    if not (isinstance(value, str) and _LIMIT.fullmatch(value) and 1 <= int(value) <= MAX_LIMIT):
        raise bad("limit", f"expected an integer from 1 to {MAX_LIMIT}, got {show(value)}", "invalid_value")
    return int(value)


def _position(name, value, ids):
    if value not in ids:
        raise bad(name, f"no model {show(value)} is served", "invalid_value")
    return ids.index(value)
