"""X-Request-Id on every answer: the client's own id when it sends a sane one, else a fresh one."""

import re
import uuid

HEADER = "X-Request-Id"
SANE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")  # what a proxy or tracer sends; anything else is replaced


def request_id(sent):
    """The id to answer with: `sent` (the request's header) when it is sane, otherwise req_ + 24 hex digits."""
    return sent if sent is not None and SANE_ID.fullmatch(sent) else f"req_{uuid.uuid4().hex[:24]}"


class RequestId:
    """Falcon middleware, first in the chain so errors from the others carry the id too. OpenAI answers
    with x-request-id (its client exposes it as `_request_id`); proxies propagate a client's id."""

    def process_request(self, req, resp):
        req.context.request_id = request_id(req.get_header(HEADER))

    def process_response(self, req, resp, resource, req_succeeded):
        resp.set_header(HEADER, getattr(req.context, "request_id", None) or request_id(None))
