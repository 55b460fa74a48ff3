"""CORS for browser clients: allowed origins get the headers, and a preflight never needs a key."""

ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, X-Api-Key, Anthropic-Version, Content-Type, X-Session-Id, X-Request-Id"
EXPOSE_HEADERS = "X-Request-Id, Retry-After"  # what a page's script may read from an answer
MAX_AGE_S = "600"


class Cors:
    """Falcon middleware, installed before auth: a preflight OPTIONS is answered 204 here.

    origins: allowed Origin values; "*" allows any. With none configured, no CORS header is sent,
    so browsers refuse cross-origin calls, but a preflight still gets its 204 without a key.
    """

    def __init__(self, origins=()):
        self.any = "*" in origins
        self.origins = frozenset(origins)

    def process_request(self, req, resp):
        if req.method != "OPTIONS":
            return
        resp.status = 204
        self._allow(req, resp)
        if resp.get_header("Access-Control-Allow-Origin") is not None:
            resp.set_header("Access-Control-Allow-Methods", ALLOW_METHODS)
            resp.set_header("Access-Control-Allow-Headers",
                            req.get_header("Access-Control-Request-Headers") or ALLOW_HEADERS)
            resp.set_header("Access-Control-Max-Age", MAX_AGE_S)
        resp.complete = True

    def process_response(self, req, resp, resource, req_succeeded):
        if req.method != "OPTIONS":
            self._allow(req, resp)

    def _allow(self, req, resp):
        origin = req.get_header("Origin")
        if origin is None or not (self.any or origin in self.origins):
            return
        resp.set_header("Access-Control-Allow-Origin", "*" if self.any else origin)
        resp.set_header("Access-Control-Expose-Headers", EXPOSE_HEADERS)
        if not self.any:
            resp.append_header("Vary", "Origin")
