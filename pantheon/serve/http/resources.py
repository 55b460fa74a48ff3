"""The cheap routes: /v1/models(/{model}), /health, /metrics, /tokenize, /detokenize (never wait on a generation)."""

from pantheon.serve.http import anthropic_models, json_body, validate, vllm_tokenize
from pantheon.serve.http.backend import UnknownModel
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.completions import resolve
from pantheon.serve.http.errors import RequestError
from pantheon.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

CHAT_FIELDS = sorted(validate.CHAT)
COMPLETION_FIELDS = sorted(validate.COMPLETIONS)


class Models:
    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        """OpenAI's list, or Anthropic's page for a client that names its anthropic-version."""
        infos = self.backend.models()
        if anthropic_models.asks(req):
            resp.media = anthropic_models.page(infos, req.params)
            return
        resp.media = {"object": "list", "data": [_model_entry(info) for info in infos]}

    def on_get_one(self, req, resp, model):
        """GET /v1/models/{model} (OpenAI's models.retrieve, Anthropic's models.retrieve): one entry, or a 404
        model_not_found."""
        info = next((i for i in self.backend.models() if i.name == model), None)
        if info is None:
            raise UnknownModel(f"model {model!r} is not served; available: "
                               f"{', '.join(i.name for i in self.backend.models())}")
        resp.media = anthropic_models.entry(info) if anthropic_models.asks(req) else _model_entry(info)


def _model_entry(info):
    """OpenAI's model object, with llama-server's `meta` and vLLM's `max_model_len` (the context a request fits)."""
    meta = {"context_length": info.n_ctx, "replicas": info.replicas, "state": info.state,
            "endpoints": ["chat.completions", "completions", "embeddings", "rerank", "score", "tokenize",
                          "detokenize"],
            "chat_fields": CHAT_FIELDS, "completion_fields": COMPLETION_FIELDS, **info.details}
    return {"id": info.name, "object": "model", "created": info.created, "owned_by": "pantheon",
            "max_model_len": info.n_ctx, "meta": meta}


class Health:
    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        serving, body = self.backend.health()
        resp.status = 200 if serving else 503
        resp.media = body


class Ping(Health):
    """vLLM's /ping (the health check SageMaker and other balancers call): /health's answer, to GET and POST."""

    on_post = Health.on_get


class Metrics:
    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        resp.content_type = METRICS_CONTENT_TYPE
        resp.text = self.backend.metrics()


class Tokenize:
    """llama-server's /tokenize: add_special defaults to false, parse_special to true; vLLM's with a `prompt`
    or `messages` body (pantheon.serve.http.vllm_tokenize)."""

    def __init__(self, backend, body_limit, prefill_assistant=True):
        self.backend, self.body_limit, self.prefill_assistant = backend, body_limit, prefill_assistant

    def on_post(self, req, resp):
        raw = json_body.read_json(req, self.body_limit)
        served = resolve(self.backend, vllm_tokenize.model_of(raw))
        req.context.model = served.name
        if vllm_tokenize.asks(raw):
            resp.media = vllm_tokenize.tokenize(served, raw, self.prefill_assistant)
            return
        body = validate.fields(raw, validate.TOKENIZE, ("content",))
        tok = served.tokenizer
        check_text_fits(served, body["content"], "content")
        ids = tok.encode(body["content"], add_special=body.get("add_special", False),
                         parse_special=body.get("parse_special", True))
        if body.get("with_pieces", False):
            resp.media = {"tokens": [{"id": t, "piece": _piece(tok.token_bytes(t, special=True))} for t in ids]}
        else:
            resp.media = {"tokens": ids}


def _piece(raw):
    """The piece as text when it is whole UTF-8, else its byte values (as llama-server does)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


class Detokenize:
    """llama-server's /detokenize: control tokens are rendered as their text."""

    def __init__(self, backend, body_limit):
        self.backend, self.body_limit = backend, body_limit

    def on_post(self, req, resp):
        body = validate.fields(json_body.read_json(req, self.body_limit), validate.DETOKENIZE, ("tokens",))
        served = resolve(self.backend, body.get("model"))
        req.context.model = served.name
        n_vocab = served.tokenizer.n_vocab
        bad = [t for t in body["tokens"] if not 0 <= t < n_vocab]
        if bad:
            raise RequestError(f"tokens: id {bad[0]} is outside the vocabulary of {n_vocab} tokens",
                               param="tokens", code="invalid_value")
        text = served.tokenizer.decode(body["tokens"], special=True)
        resp.media = {"content": text, "prompt": text}  # llama-server's name, and vLLM's
