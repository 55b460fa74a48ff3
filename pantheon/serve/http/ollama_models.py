"""Ollama's model and embedding routes: GET /api/version, /api/tags, /api/ps; POST /api/show, /api/embed(dings)."""

import time
from datetime import timedelta

from pantheon import __version__
from pantheon.serve.http import json_body, ollama_fields, validate
from pantheon.serve.http.backend import BackendError
from pantheon.serve.http.embeddings import EUCLIDEAN, embed_all, normalized, pooling, token_lists
from pantheon.serve.http.field_types import bad
from pantheon.serve.http.fim import has_fim
from pantheon.serve.http.ollama import NS, now, resolve_tagged, shown_name


def _served_models(backend):
    """(ModelInfo, ServedModel) of every model that is loaded now (one still loading is left out)."""
    out = []
    for info in backend.models():
        if info.state != "loaded":
            continue
        try:
            out.append((info, backend.served(info.name)))
        except BackendError:  # unloaded or failed since models() was read
            continue
    return out


def details(served):
    """Ollama's `details` of a model; empty values where its file was not described."""
    card = served.card
    if card is None:
        return {"parent_model": "", "format": "gguf", "family": "", "families": None, "parameter_size": "",
                "quantization_level": ""}
    return {"parent_model": "", "format": card.format, "family": card.family, "families": [card.family],
            "parameter_size": card.parameter_size, "quantization_level": card.quantization}


def _entry(served):
    card = served.card
    return {"name": shown_name(served), "model": shown_name(served), "modified_at": card.modified if card else now(),
            "size": card.size if card else 0, "digest": card.digest if card else "", "details": details(served)}


def capabilities(served):
    """Ollama's capability words: completion or embedding, and tools, insert, thinking where they apply."""
    if served.pooling and served.pooling != "none":
        return ["embedding"]
    out = ["completion"]
    if served.prompts.tool_format is not None:
        out.append("tools")
    if has_fim(served.tokenizer):
        out.append("insert")
    return out + (["thinking"] if served.think_ids else [])


class Version:
    def on_get(self, req, resp):
        resp.media = {"version": __version__}


class Tags:
    """GET /api/tags: every loaded model, as Ollama lists the models it has."""

    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        resp.media = {"models": [_entry(served) for _, served in _served_models(self.backend)]}


# Ollama's keep_alive -1 (loaded until unloaded, as every model here is) makes expires_at now plus Go's longest
# duration, which `ollama ps` shows as "Forever".
FOREVER = timedelta(microseconds=(1 << 63) // 1000)


def _running(info, served):
    """One /api/ps entry: size_vram is the share of the model's bytes on CUDA dies (a pool with one GPU and one
    CPU replica holds half of its copies in VRAM); no die list (the in-process backend) is all host RAM."""
    entry = _entry(served)
    dies = info.details.get("dies") or ()
    on_gpu = sum(1 for d in dies if d.startswith("cuda"))
    return dict(entry, expires_at=now(FOREVER), size_vram=entry["size"] * on_gpu // len(dies) if dies else 0,
                context_length=served.n_ctx)


class Running:
    """GET /api/ps: the loaded models with their context and VRAM share; they stay until unloaded."""

    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        resp.media = {"models": [_running(info, served) for info, served in _served_models(self.backend)]}


class Show:
    """POST /api/show: details, model_info, capabilities and the chat template (Jinja, not Go)."""

    def __init__(self, backend, body_limit):
        self.backend, self.body_limit = backend, body_limit

    def on_post(self, req, resp):
        values = validate.fields(json_body.read_json(req, self.body_limit), ollama_fields.SHOW)
        name = values.get("model", values.get("name"))
        if name is None:
            raise bad("model", "required", "missing_required_parameter")
        served = resolve_tagged(self.backend, name)
        req.context.model = served.name
        family = served.card.family if served.card else ""
        info = {"general.architecture": family, f"{family}.context_length": served.n_ctx,
                f"{family}.embedding_length": served.n_embd}
        if served.card:
            info["general.parameter_count"] = served.card.parameters
        resp.media = {"modelfile": "", "parameters": "", "template": served.prompts.template.source,
                      "details": details(served), "model_info": info, "capabilities": capabilities(served),
                      "modified_at": served.card.modified if served.card else now()}


class Embed:
    """POST /api/embed: unit-length vectors, inputs cut to the context unless truncate is false."""

    def __init__(self, backend, body_limit, recorder=None):
        self.backend, self.body_limit, self.recorder = backend, body_limit, recorder

    def on_post(self, req, resp):
        started = time.perf_counter()
        values = validate.fields(json_body.read_json(req, self.body_limit), ollama_fields.EMBED, ("model",))
        served = resolve_tagged(self.backend, values["model"])
        req.context.model = served.name
        kind = pooling(served)
        texts = values.get("input", [])
        cut = values.get("truncate", True)
        lists = [_truncated(served, t) for t in texts] if cut else token_lists(served, texts, "input")
        dims = values.get("dimensions", served.n_embd)
        if dims > served.n_embd:
            raise bad("dimensions", f"model {served.name} makes {served.n_embd}-dimensional embeddings; got {dims}",
                      "invalid_value")
        vectors = embed_all(self.backend, served, lists, kind) if lists else []
        n = sum(len(ids) for ids in lists)
        if self.recorder is not None:
            self.recorder.tokens(served.name, n, 0)
        resp.media = {"model": shown_name(served), "embeddings": [normalized(v[:dims], EUCLIDEAN).tolist()
                                                                  for v in vectors],
                      "total_duration": int((time.perf_counter() - started) * NS), "load_duration": 0,
                      "prompt_eval_count": n}


def _truncated(served, text):
    """The text's ids (BOS and EOS as for any embedding) cut to what the context holds; a text too long
    to tokenize whole is cut first to as many characters as the context's tokens can hold."""
    limit = served.n_ctx - 1
    text = text[:limit * served.tokenizer.max_token_chars]
    ids = served.tokenizer.encode(text, add_special=True, parse_special=True)[:limit]
    if not ids:
        raise bad("input", "an input has no tokens", "invalid_value")
    return ids


class Embeddings:
    """POST /api/embeddings (Ollama's older route): one vector, as pooled (not normalized)."""

    def __init__(self, backend, body_limit, recorder=None):
        self.backend, self.body_limit, self.recorder = backend, body_limit, recorder

    def on_post(self, req, resp):
        values = validate.fields(json_body.read_json(req, self.body_limit), ollama_fields.EMBEDDINGS, ("model",))
        served = resolve_tagged(self.backend, values["model"])
        req.context.model = served.name
        kind = pooling(served)
        if not values.get("prompt"):
            resp.media = {"embedding": []}  # Ollama's answer to an empty prompt (a load)
            return
        lists = token_lists(served, [values["prompt"]], "prompt")
        if self.recorder is not None:
            self.recorder.tokens(served.name, len(lists[0]), 0)
        resp.media = {"embedding": normalized(embed_all(self.backend, served, lists, kind)[0], -1).tolist()}
