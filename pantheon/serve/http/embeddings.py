"""POST /v1/embeddings and llama-server's /embedding: inputs tokenized here, pooled on a die, normalized here."""

import base64
from collections import deque

import numpy as np

from pantheon.engine.sampler import SamplingParams
from pantheon.serve.http import json_body, truncation, validate
from pantheon.serve.http.backend import ContextOverBudget, Embedding, GenerationFailed, GenerationRequest
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.completions import resolve
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad, integer, positive, show, string

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
EUCLIDEAN = 2  # llama-server's default embd_normalize
# how a model whose GGUF states no pooling_type is pooled: a causal decoder's last token has read the
# whole input (what vLLM does for decoder models, and what Qwen3-Embedding and gte-Qwen2 are trained for)
DEFAULT_POOLING = "last"


def _inputs(name, v):
    """A list of inputs, each a string or a list of token ids (OpenAI's four shapes of `input`)."""
    if isinstance(v, str) or validate.is_ids(v):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) or validate.is_ids(x) for x in v):
        raise bad(name, "expected a string, a non-empty list of token ids, or a non-empty list of those")
    if len(v) > MAX_INPUTS:
        raise bad(name, f"at most {MAX_INPUTS} inputs per request, got {len(v)}", "invalid_value")
    if "" in v:
        raise bad(name, "an input must not be an empty string", "invalid_value")
    return v


def _encoding(name, v):
    if v not in ("float", "base64"):
        raise bad(name, f"expected \"float\" or \"base64\", got {show(v)}", "invalid_value")
    return v


def _normalize(name, v):
    """llama-server's embd_normalize: -1 none, 0 max-abs to int16 range, 1 taxicab, 2 euclidean, p > 2 p-norm."""
    return integer(name, v, -1, 1 << 16)


OPENAI = {"model": string, "input": _inputs, "encoding_format": _encoding, "dimensions": positive,
          "user": string, "embd_normalize": _normalize, "truncate_prompt_tokens": truncation.field}
NATIVE = {"model": string, "content": _inputs, "input": _inputs, "embd_normalize": _normalize}


def normalized(vector, how):
    """float32 [d]: `vector` scaled as llama.cpp's common_embd_normalize does (a zero norm gives zeros)."""
    v = np.asarray(vector, np.float64)  # [d]
    if how < 0:
        return v.astype(np.float32)  # [d]
    if how == 0:
        norm = np.abs(v).max() / 32760.0
    elif how == 1:
        norm = np.abs(v).sum()
    elif how == 2:
        norm = np.sqrt((v * v).sum())
    else:
        norm = (np.abs(v) ** how).sum() ** (1.0 / how)
    return (v / norm if norm > 0 else np.zeros_like(v)).astype(np.float32)  # [d]


def pooling(served, per_token=False):
    """The pooling the model's embeddings use; a 400 when it is not one this route serves (`per_token`:
    pooling none's one vector per token, which only llama-server's /embedding returns)."""
    kind = served.pooling or DEFAULT_POOLING
    if kind == "none" and not per_token:
        raise RequestError(f"model {served.name} has pooling type 'none' (one embedding per token), which is "
                           "not OpenAI-compatible: /embedding returns its per-token vectors",
                           param="model", code="unsupported_value")
    if kind == "rank":
        raise RequestError(f"model {served.name} is a reranker (pooling type 'rank'): it scores documents "
                           "at /v1/rerank", param="model", code="unsupported_value")
    return kind


def token_lists(served, inputs, name, keep=None):
    """Each input's token ids: text as llama-server tokenizes it for embeddings (with the model's BOS
    and EOS, special tokens parsed), ids range-checked; every list must fit the context. `keep` (vLLM's
    truncate_prompt_tokens): each input keeps its first that many tokens (a text its special ones too)."""
    out = []
    for i, item in enumerate(inputs):
        item = _ids(served, item, f"{name}[{i}]", keep)
        if not item:
            raise bad(f"{name}[{i}]", "has no tokens", "invalid_value")
        if len(item) >= served.n_ctx:
            raise ContextOverBudget(f"{name}[{i}] has {len(item)} tokens; model {served.name} embeds at most "
                                    f"{served.n_ctx - 1} (its context is {served.n_ctx})", len(item), served.n_ctx)
        out.append(list(item))
    return out


def _ids(served, item, where, keep):
    """One input's ids (its first `keep` when asked)."""
    tok = served.tokenizer
    if isinstance(item, str) and keep is not None:
        return truncation.first_ids(tok, truncation.first_text(served, item, keep), keep)
    if isinstance(item, str):
        check_text_fits(served, item, where)
        return tok.encode(item, add_special=True, parse_special=True)
    item = item if keep is None else item[:keep]
    if not all(0 <= t < tok.n_vocab for t in item):
        raise bad(where, f"a token id is outside the vocabulary of {tok.n_vocab} tokens", "invalid_value")
    return item


def embed_all(backend, served, lists, kind):
    """Pooled float32 vectors, one per token list, in order; as many run at once as the model decodes
    together (each is one sequence on a die), the rest follow as places free up."""
    window, out, queued, running = max(1, served.max_choices), [], deque(lists), deque()
    try:
        while queued or running:
            while queued and len(running) < window:
                ids = queued.popleft()
                running.append(backend.generate(GenerationRequest(served.name, tuple(ids), 0, SamplingParams(),
                                                                  frozenset(), embed=kind)))
            out.append(_vector(running.popleft(), len(out)))
    except BaseException:
        for stream in running:
            stream.cancel()
        raise
    return out


def _vector(stream, index):
    vector = None
    for event in stream:
        if isinstance(event, Embedding):
            vector = event.vector
    if vector is None:
        raise GenerationFailed(f"input {index} ended without its embedding")
    return vector


class _Route:
    """What both routes share: the body, the model, the inputs' ids and their vectors."""

    schema, inputs = OPENAI, ("input",)  # the fields that may hold the inputs, the first present wins
    per_token = False  # whether a model of pooling none is served (one vector per token)

    def __init__(self, backend, body_limit, recorder=None):
        self.backend, self.body_limit, self.recorder = backend, body_limit, recorder  # recorder: metrics

    def _run(self, req):
        body = validate.fields(json_body.read_json(req, self.body_limit), self.schema)
        name = next((k for k in self.inputs if k in body), None)
        if name is None:
            raise bad(self.inputs[-1], "required", "missing_required_parameter")
        served = resolve(self.backend, body.get("model"))
        req.context.model = served.name
        kind = pooling(served, self.per_token)
        lists = token_lists(served, body[name], name, truncation.limit(served, body.get("truncate_prompt_tokens")))
        vectors = embed_all(self.backend, served, lists, kind)
        if self.recorder is not None:
            self.recorder.tokens(served.name, sum(len(ids) for ids in lists), 0)
        return body, served, lists, vectors, kind


class Embeddings(_Route):
    """OpenAI's /v1/embeddings: unit-length vectors (embd_normalize 2 unless asked), float or base64,
    cut to `dimensions` first when asked (Matryoshka-trained models keep their meaning when cut)."""

    def on_post(self, req, resp):
        body, served, lists, vectors, _ = self._run(req)
        dims = body.get("dimensions", served.n_embd)
        if not 1 <= dims <= served.n_embd:
            raise bad("dimensions", f"model {served.name} makes {served.n_embd}-dimensional embeddings; "
                      f"dimensions must be within 1..{served.n_embd}, got {dims}", "invalid_value")
        how = body.get("embd_normalize", EUCLIDEAN)
        as_b64 = body.get("encoding_format", "float") == "base64"
        data = []
        for i, vector in enumerate(vectors):
            v = normalized(vector[:dims], how)  # [dims]
            value = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") if as_b64 else v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": value})
        n = sum(len(ids) for ids in lists)
        resp.media = {"object": "list", "data": data, "model": served.name,
                      "usage": {"prompt_tokens": n, "total_tokens": n}}


class NativeEmbedding(_Route):
    """llama-server's /embedding (and /embeddings): [{"index", "embedding": [[...]]}], one pooled vector
    per input wrapped in a list; for a model of pooling none, every token's vector, not normalized (as
    llama-server: a norm is a pooled vector's)."""

    schema, inputs = NATIVE, ("input", "content")  # llama-server reads `input` before `content`
    per_token = True

    def on_post(self, req, resp):
        body, served, _, vectors, kind = self._run(req)
        how = body.get("embd_normalize", EUCLIDEAN)
        if kind == "none":
            rows = [np.asarray(v, np.float32).reshape(-1, served.n_embd).tolist() for v in vectors]  # [n, dim] each
            resp.media = [{"index": i, "embedding": r} for i, r in enumerate(rows)]
            return
        resp.media = [{"index": i, "embedding": [normalized(v, how).tolist()]} for i, v in enumerate(vectors)]
