"""API-key auth (a bearer token, or X-Api-Key): every route but /health, /v1/health, /ping, /version, /metrics,
/admin/*, preflights."""

import hmac

from pantheon.serve.http.errors import RequestError

PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/metrics", "/ping", "/version"})


class BearerAuth:
    """Falcon middleware; with no keys configured every request passes."""

    def __init__(self, api_keys):
        self.keys = tuple(k.encode() for k in api_keys)

    def process_request(self, req, resp):
        if not self.keys or req.method == "OPTIONS" or req.path in PUBLIC_PATHS or req.path.startswith("/admin"):
            return
        scheme, _, token = (req.get_header("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            token = req.get_header("X-Api-Key") or ""  # how Anthropic's clients send their key
        if not token.strip():
            raise _refused("missing API key: send the header Authorization: Bearer <key> (or X-Api-Key: <key>)")
        token = token.strip().encode()
        # compare against every key, so the time taken does not tell which one nearly matched
        if not sum(hmac.compare_digest(token, key) for key in self.keys):
            raise _refused("incorrect API key provided")


def _refused(message):
    return RequestError(message, code="invalid_api_key", status=401, type="authentication_error",
                        headers={"WWW-Authenticate": "Bearer"})
