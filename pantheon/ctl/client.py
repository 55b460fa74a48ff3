"""HTTP client of pantheon-serve's admin routes (standard library only), with typed failures."""

import http.client
import json
import socket

from pantheon.ctl.endpoint import Endpoint, decode
from pantheon.errors import PantheonError

DEFAULT_HTTP_TIMEOUT = 30.0
_SNIPPET = 200   # characters of a non-JSON answer quoted in an error


class AdminError(PantheonError):
    """A request to the server did not succeed; `status` is the HTTP status, or None without one."""

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body    # the decoded JSON answer, when there was one

    @property
    def error(self):
        """The OpenAI-style `error` object of the answer ({} without one)."""
        err = self.body.get("error") if isinstance(self.body, dict) else None
        return err if isinstance(err, dict) else {}

    @property
    def code(self):
        return self.error.get("code")


class Refused(AdminError):
    """The server answered 4xx: the request was understood and turned down."""


class Unavailable(AdminError):
    """The server could not be reached, timed out, failed (5xx) or answered something unreadable."""


class AdminClient:
    """Talks to one pantheon-serve at `url` (http:// or https://, optionally with a path prefix)."""

    def __init__(self, url, token=None, timeout=DEFAULT_HTTP_TIMEOUT):
        self.url, self.timeout, self.endpoint = url, timeout, Endpoint(url, token)

    def models(self):
        return self._json("GET", "/admin/models")

    def dies(self):
        return self._json("GET", "/admin/dies")

    def health(self):
        """(status, answer): 200 and 503 are both answers of /health, not failures."""
        status, body = self.request("GET", "/health")
        if status not in (200, 503):
            raise _failure(status, body, "/health")
        return status, _object(body, "/health")

    def load(self, path, name=None, dies=None, ctx_cap=None, batch_slots=None, timeout=None, wait=None, config=None,
             extra=None):
        """POST /admin/models/load; `wait` is how long to wait for the answer (>= the load timeout).

        config and the `extra` fields (pooling, max_sessions, ...) go in the body only when not None."""
        body = {"path": path, "name": name, "dies": list(dies) if dies else None, "ctx_cap": ctx_cap,
                "batch_slots": batch_slots, "timeout": timeout}
        optional = dict(extra or {}, config=config)
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._json("POST", "/admin/models/load", body, wait)

    def unload(self, name, timeout=None, wait=None):
        return self._json("POST", "/admin/models/unload", {"name": name, "timeout": timeout}, wait)

    def _json(self, method, route, payload=None, wait=None):
        status, body = self.request(method, route, payload, wait)
        if status != 200:
            raise _failure(status, body, route)
        return _object(body, route)

    def request(self, method, route, payload=None, wait=None):
        """(status, decoded JSON or the raw text when it is not JSON); raises Unavailable on transport failure."""
        wait = self.timeout if wait is None else wait
        conn = self.endpoint.connection(wait)
        try:
            conn.request(method, self.endpoint.prefix + route, **self.endpoint.encode(payload))
            reply = conn.getresponse()
            return reply.status, decode(reply.read())
        except (TimeoutError, socket.timeout):
            raise Unavailable(f"{self.url}: no answer within {wait:g} s") from None
        except ConnectionRefusedError:
            raise Unavailable(f"{self.url}: connection refused (is pantheon-serve running?)") from None
        except socket.gaierror as e:
            raise Unavailable(f"{self.url}: cannot resolve {self.endpoint.host}: {e.strerror}") from None
        except (http.client.HTTPException, OSError) as e:
            raise Unavailable(f"{self.url}: {type(e).__name__}: {e}") from None
        finally:
            conn.close()

def _object(body, route):
    if not isinstance(body, dict):
        raise Unavailable(f"{route}: the server's answer is not a JSON object: {_snippet(body)}")
    return body


def _failure(status, body, route):
    """The typed error for a non-success answer, carrying the server's error.message."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        code = f" {err['code']}" if err.get("code") else ""
        message = f"HTTP {status}{code}: {err['message']}"
    else:
        message = f"HTTP {status} from {route}: {_snippet(body)}"
    cls = Refused if 400 <= status < 500 else Unavailable
    return cls(message, status, body if isinstance(body, dict) else None)


def _snippet(body):
    text = body if isinstance(body, str) else json.dumps(body)
    text = text.strip() or "(empty)"
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."
