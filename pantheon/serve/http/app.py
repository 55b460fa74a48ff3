"""create_app: the OpenAI-compatible WSGI app (Falcon) over any Backend."""

import falcon

from pantheon.serve.http import errors, score
from pantheon.serve.http.admin import AdminAuth, add_admin_routes
from pantheon.serve.http.anthropic import AnthropicErrors, CountTokens, Messages
from pantheon.serve.http.auth import BearerAuth
from pantheon.serve.http.completions import ChatCompletions, Completions, Options
from pantheon.serve.http.cors import Cors
from pantheon.serve.http.native import ApplyTemplate, Infill, NativeCompletion, Props, Slots
from pantheon.serve.http.ollama import OllamaChat, OllamaErrors, OllamaGenerate
from pantheon.serve.http.ollama_models import Embed, Embeddings as OllamaEmbeddings, Running, Show, Tags, Version
from pantheon.serve.http.disconnect import DisconnectWatch
from pantheon.serve.http.embeddings import Embeddings, NativeEmbedding
from pantheon.serve.http.request_id import RequestId
from pantheon.serve.http.rerank import Rerank
from pantheon.serve.http.responses import InputTokens, Responses, Stored
from pantheon.serve.http.resources import Detokenize, Health, Metrics, Models, Ping, Tokenize
from pantheon.serve.http.shapes import FINGERPRINT
from pantheon.serve.limits import DEFAULT_SSE_KEEPALIVE
from pantheon.serve.metrics import OTHER

RERANK_ROUTES = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")  # llama-server answers all four

ENDPOINTS = {"/v1/chat/completions": "chat_completions", "/v1/completions": "completions",
             "/chat/completions": "chat_completions", "/completions": "completions",
             "/tokenize": "tokenize", "/detokenize": "detokenize", "/v1/embeddings": "embeddings",
             "/embeddings": "embeddings", "/embedding": "embeddings", **{r: "rerank" for r in RERANK_ROUTES},
             "/api/chat": "chat_completions", "/api/generate": "completions", "/api/embed": "embeddings",
             "/api/embeddings": "embeddings", "/v1/messages": "chat_completions", "/messages": "chat_completions",
             "/v1/responses": "chat_completions", "/responses": "chat_completions",
             **{r: "rerank" for r in score.ROUTES}}


def _add_ollama_routes(app, backend, options, body_limit, metrics):
    """Ollama's API (/api/...), for clients written against an Ollama server."""
    app.add_route("/api/version", Version())
    app.add_route("/api/tags", Tags(backend))
    app.add_route("/api/ps", Running(backend))
    app.add_route("/api/show", Show(backend, body_limit))
    app.add_route("/api/chat", OllamaChat(backend, options))
    app.add_route("/api/generate", OllamaGenerate(backend, options))
    app.add_route("/api/embed", Embed(backend, body_limit, metrics))
    app.add_route("/api/embeddings", OllamaEmbeddings(backend, body_limit, metrics))


class _CountRequests:
    """Falcon middleware: one count per answered request on the endpoints the metrics name."""

    def __init__(self, recorder):
        self.recorder = recorder

    def process_response(self, req, resp, resource, req_succeeded):
        endpoint = ENDPOINTS.get(req.path)
        if endpoint is not None:
            self.recorder.request(getattr(req.context, "model", OTHER), endpoint, resp.status_code)


def create_app(backend, api_keys=(), metrics=None, default_max_tokens=512, body_limit=16 * 2**20,
               fingerprint=FINGERPRINT, admin=None, admin_token=None, admin_on=True, cors_origins=(),
               reasoning_format="auto", response_store=None, sse_keepalive=DEFAULT_SSE_KEEPALIVE,
               prefill_assistant=True):
    """A falcon.App (WSGI) serving the OpenAI API over `backend` (pantheon.serve.http.backend.Backend).

    api_keys: bearer keys; empty means no auth. metrics: this process's pantheon.serve.metrics.Recorder
    (request counts, tokens, latencies), or None to record nothing here. default_max_tokens: used
    when a request sets none (None: until the context is full). body_limit: bytes per request body.
    admin: an object with admin_models/admin_dies/admin_load/admin_unload (None: no /admin routes),
    guarded by admin_token; admin_on=False answers 403 (a non-loopback bind without a token).
    cors_origins: origins allowed cross-origin ("*": any). reasoning_format: "none" leaves <think> text
    in content; "auto"/"deepseek" move it to reasoning_content (a request's reasoning_format wins).
    response_store: a pantheon.serve.response_store.ResponseStore for the Responses API's stored responses
    (previous_response_id, GET /v1/responses/{id}); None: responses are made as with store false.
    sse_keepalive: seconds of silence after which an SSE stream gets a comment line (0: never).
    prefill_assistant: a chat's final assistant message starts the reply, which continues it (llama-server's
    default; False: it is a finished turn, as OpenAI reads it).
    The OpenAI routes answer with and without the /v1 prefix, as bare base URLs call them.
    """
    middleware = [RequestId(), Cors(cors_origins), AdminAuth(admin_token, admin_on), BearerAuth(api_keys),
                  OllamaErrors(), AnthropicErrors()]
    middleware += [_CountRequests(metrics)] if metrics is not None else []
    app = falcon.App(middleware=middleware)
    app.req_options.strip_url_path_trailing_slash = True
    errors.install(app)
    options = Options(default_max_tokens, body_limit, fingerprint, metrics, DisconnectWatch(), reasoning_format,
                      response_store, sse_keepalive, prefill_assistant)
    for prefix in ("/v1", ""):
        models = Models(backend)
        app.add_route(f"{prefix}/models", models)
        app.add_route(f"{prefix}/models/{{model:path}}", models, suffix="one")  # ids may hold "/" (org/name)
        app.add_route(f"{prefix}/health", Health(backend))  # llama-server answers /v1/health too
        app.add_route(f"{prefix}/chat/completions", ChatCompletions(backend, options))
        app.add_route(f"{prefix}/completions", Completions(backend, options))
        app.add_route(f"{prefix}/messages", Messages(backend, options))  # Anthropic's
        app.add_route(f"{prefix}/messages/count_tokens", CountTokens(backend, options))
        app.add_route(f"{prefix}/responses", Responses(backend, options))  # OpenAI's Responses API
        app.add_route(f"{prefix}/responses/input_tokens", InputTokens(backend, options))
        stored = Stored(response_store, options.keepalive)
        app.add_route(f"{prefix}/responses/{{response_id}}", stored)
        app.add_route(f"{prefix}/responses/{{response_id}}/input_items", stored, suffix="items")
        app.add_route(f"{prefix}/responses/{{response_id}}/cancel", stored, suffix="cancel")
    app.add_route("/v1/embeddings", Embeddings(backend, body_limit, metrics))
    app.add_route("/embeddings", NativeEmbedding(backend, body_limit, metrics))  # llama-server's, as its own
    app.add_route("/embedding", NativeEmbedding(backend, body_limit, metrics))
    for route in RERANK_ROUTES:
        app.add_route(route, Rerank(backend, body_limit, metrics))
    for route in score.ROUTES:
        app.add_route(route, score.Score(backend, body_limit, metrics))
    app.add_route("/completion", NativeCompletion(backend, options))
    app.add_route("/infill", Infill(backend, options))
    app.add_route("/apply-template", ApplyTemplate(backend, options))
    app.add_route("/props", Props(backend))
    app.add_route("/slots", Slots(backend))
    app.add_route("/tokenize", Tokenize(backend, body_limit, prefill_assistant))
    app.add_route("/detokenize", Detokenize(backend, body_limit))
    app.add_route("/metrics", Metrics(backend))
    app.add_route("/ping", Ping(backend))  # vLLM's
    app.add_route("/version", Version())  # vLLM's, in the shape of Ollama's /api/version
    _add_ollama_routes(app, backend, options, body_limit, metrics)
    if admin is not None:
        add_admin_routes(app, admin, body_limit)
    return app
