"""vLLM's /score: text pairs scored by a reranker (its relevance through a sigmoid, as vLLM's cross-encoders
answer) or, for an embedding model, by the cosine of the two texts' embeddings."""

import math
import time
import uuid

import numpy as np

from pantheon.serve.http import json_body, validate
from pantheon.serve.http.completions import resolve
from pantheon.serve.http.embeddings import MAX_INPUTS, embed_all, pooling, token_lists
from pantheon.serve.http.field_types import bad, only, string
from pantheon.serve.http.rerank import pair_lists

ROUTES = ("/score", "/v1/score")


def _texts(name, v):
    """A string, or a non-empty list of at most MAX_INPUTS strings."""
    if isinstance(v, str):
        return v
    if not isinstance(v, list) or not v or not all(isinstance(t, str) for t in v):
        raise bad(name, "expected a string or a non-empty list of strings")
    if len(v) > MAX_INPUTS:
        raise bad(name, f"at most {MAX_INPUTS} texts per request, got {len(v)}", "invalid_value")
    return v


SCHEMA = {"model": string, "text_1": _texts, "text_2": _texts, "user": string,
          "truncate_prompt_tokens": only(None, "inputs are never cut here: one that does not fit is refused")}


def pairs(body):
    """(text_1, text_2) pairs: one text_1 against every text_2, or two lists of one length side by side."""
    firsts, seconds = ([t] if isinstance(t, str) else t for t in (body["text_1"], body["text_2"]))
    if len(firsts) == 1:
        firsts = firsts * len(seconds)
    if len(firsts) != len(seconds):
        raise bad("text_2", f"text_1 holds {len(firsts)} texts and text_2 {len(seconds)}: give one text_1, or as "
                  "many as text_2", "invalid_value")
    return list(zip(firsts, seconds))


class Score:
    """POST /score and /v1/score (vLLM's), in vLLM's answer shape."""

    def __init__(self, backend, body_limit, recorder=None):
        self.backend, self.body_limit, self.recorder = backend, body_limit, recorder  # recorder: metrics

    def on_post(self, req, resp):
        body = validate.fields(json_body.read_json(req, self.body_limit), SCHEMA, ("text_1", "text_2"))
        served = resolve(self.backend, body.get("model"))
        req.context.model = served.name
        scores, n = (_relevance if served.pooling == "rank" else _cosines)(self.backend, served, pairs(body))
        if self.recorder is not None:
            self.recorder.tokens(served.name, n, 0)
        resp.media = {"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                      "model": served.name, "data": [{"index": i, "object": "score", "score": s}
                                                      for i, s in enumerate(scores)],
                      "usage": {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0}}


def _relevance(backend, served, texts):
    """(each pair's sigmoid of the reranker's first head output, tokens read)."""
    lists = pair_lists(served, texts, "text_2")
    scores = [1.0 / (1.0 + math.exp(-float(v[0]))) for v in embed_all(backend, served, lists, "rank")]
    return scores, sum(len(ids) for ids in lists)


def _cosines(backend, served, texts):
    """(each pair's cosine similarity of its two embeddings, tokens read); each distinct text embedded once."""
    kind = pooling(served)
    distinct = list(dict.fromkeys(t for pair in texts for t in pair))
    lists = token_lists(served, distinct, "text")
    vectors = dict(zip(distinct, embed_all(backend, served, lists, kind)))
    return [_cosine(vectors[a], vectors[b]) for a, b in texts], sum(len(ids) for ids in lists)


def _cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)  # [n_embd], [n_embd]
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norm if norm > 0.0 else 0.0
