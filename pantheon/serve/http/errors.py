"""The one place where every failure becomes an OpenAI-style error body and status."""

import logging
import math

import falcon

from pantheon.errors import EngineError, InvalidParameter, PantheonError, TemplateError
from pantheon.serve.http.backend import BackendError

log = logging.getLogger(__name__)

_TYPE_BY_STATUS = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error",
                   429: "rate_limit_error"}
_CODE_BY_STATUS = {404: "not_found", 405: "method_not_allowed", 411: "length_required",
                   413: "request_too_large", 415: "unsupported_media_type"}


class RequestError(PantheonError):
    """A request the HTTP layer refuses before it reaches a backend (bad JSON, bad field, bad key)."""

    def __init__(self, message, param=None, code="invalid_value", status=400,
                 type="invalid_request_error", headers=None):
        super().__init__(message)
        self.param, self.code, self.status, self.type = param, code, status, type
        self.headers = headers or {}


def error_body(message, type, code=None, param=None, **extra):
    return {"error": {"message": message, "type": type, "code": code, "param": param, **extra}}


def retry_after_header(seconds):
    """Retry-After in whole seconds (ceiling, at least 1)."""
    return str(max(1, math.ceil(seconds)))


def install(app):
    """Register the handlers on a falcon.App; later registrations win for more specific classes."""
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(falcon.HTTPError, _http_error)
    app.add_error_handler(PantheonError, _pantheon_error)
    app.add_error_handler(BackendError, _backend_error)
    app.add_error_handler(RequestError, _request_error)


def _write(resp, status, body, headers=()):
    resp.status = status
    resp.media = body
    for name, value in dict(headers).items():
        resp.set_header(name, value)


def _request_error(req, resp, ex, params):
    _write(resp, ex.status, error_body(str(ex), ex.type, ex.code, ex.param), ex.headers)


def _backend_error(req, resp, ex, params):
    headers = {} if ex.retry_after is None else {"Retry-After": retry_after_header(ex.retry_after)}
    _write(resp, ex.status, error_body(str(ex), ex.type, ex.code, ex.param, **ex.extra), headers)


def _pantheon_error(req, resp, ex, params):
    """Engine-side refusals of what the client sent: bad parameters, templates, token ids."""
    if isinstance(ex, InvalidParameter):
        _write(resp, 400, error_body(str(ex), "invalid_request_error", "invalid_value", ex.field))
    elif isinstance(ex, TemplateError):
        _write(resp, 400, error_body(str(ex), "invalid_request_error", "template_error", "messages"))
    elif isinstance(ex, EngineError):
        _write(resp, 400, error_body(str(ex), "invalid_request_error", "invalid_value"))
    else:
        _unexpected(req, resp, ex, params)


def _http_error(req, resp, ex, params):
    """Falcon's own errors: unknown route (404), wrong method (405), and the like."""
    status = ex.status_code
    type_ = _TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")
    message = ex.description or ex.title or falcon.HTTP_STATUS_CODES.get(status, "error")
    if status == 404:
        message = f"no route {req.method} {req.path}"
    elif status == 405:
        message = f"method {req.method} is not allowed on {req.path}"
    _write(resp, status, error_body(message, type_, _CODE_BY_STATUS.get(status)), ex.headers or {})


def _unexpected(req, resp, ex, params):
    log.exception("unhandled error serving %s %s", req.method, req.path)
    _write(resp, 500, error_body("internal server error", "server_error", "internal_error"))
