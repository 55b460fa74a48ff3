"""POST /v1/rerank (llama-server's, Jina's and Cohere's shape; TEI's with `texts`): documents scored against a query."""

import re

from pantheon.serve.http import json_body, validate
from pantheon.serve.http.backend import ContextOverBudget
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.completions import resolve
from pantheon.serve.http.embeddings import MAX_INPUTS, embed_all
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad, boolean, positive, string

_PLACEHOLDER = re.compile(r"\{(query|document)\}")


def _documents(name, v):
    """Strings, or objects with a string `text` (Jina's and Cohere's other form), at most MAX_INPUTS."""
    if not isinstance(v, list) or not v:
        raise bad(name, "expected a non-empty list of strings")
    if len(v) > MAX_INPUTS:
        raise bad(name, f"at most {MAX_INPUTS} documents per request, got {len(v)}", "invalid_value")
    out = [d.get("text") if isinstance(d, dict) else d for d in v]
    if not all(isinstance(d, str) for d in out):
        raise bad(name, "expected a list of strings (or of objects with a string \"text\")")
    return out


SCHEMA = {"model": string, "query": string, "documents": _documents, "texts": _documents, "top_n": positive,
          "return_documents": boolean, "return_text": boolean, "user": string}


def reranker(served):
    """`served` when its GGUF makes it a reranker (pooling type rank), else a 400 naming it."""
    if served.pooling != "rank":
        raise RequestError(f"model {served.name} is not a reranker (its pooling type is "
                           f"{served.pooling or 'unset'}, not rank)", param="model", code="unsupported_value")
    return served


def pair_ids(served, query, document):
    """The ids llama-server scores for one (query, document) pair: the model's rerank template with
    both filled in (special tokens parsed), else BOS query EOS SEP document EOS as the vocabulary adds them."""
    tok = served.tokenizer
    if served.rerank_template:
        fill = {"query": query, "document": document}
        text = _PLACEHOLDER.sub(lambda m: fill[m.group(1)], served.rerank_template)  # one pass: no re-expansion
        return tok.encode(text, add_special=False, parse_special=True)
    eos = tok.eos_id if tok.eos_id is not None else tok.sep_id
    ids = [tok.bos_id] if tok.add_bos else []
    ids += tok.encode(query, add_special=False)
    ids += [eos] if tok.add_eos else []
    ids += [tok.sep_id] if tok.add_sep and tok.sep_id is not None else []
    ids += tok.encode(document, add_special=False)
    return ids + ([eos] if tok.add_eos else [])


def pair_lists(served, pairs, name):
    """The ids of each (query, document) pair, each within the context (`name`[i] names a pair that is not)."""
    out = []
    for i, (query, doc) in enumerate(pairs):
        check_text_fits(served, query + doc, f"{name}[{i}]")
        ids = pair_ids(served, query, doc)
        if len(ids) >= served.n_ctx:
            raise ContextOverBudget(f"query and {name}[{i}] make {len(ids)} tokens; model {served.name} ranks "
                                    f"at most {served.n_ctx - 1} (its context is {served.n_ctx})",
                                    len(ids), served.n_ctx)
        out.append(ids)
    return out


class Rerank:
    """Every document's score (the head's first output: a reranker's relevance), best first, cut to top_n.
    With `documents` the answer is llama-server's and Jina's {"results": [{"index", "relevance_score"}]};
    with `texts` it is TEI's bare [{"index", "score"}]."""

    def __init__(self, backend, body_limit, recorder=None):
        self.backend, self.body_limit, self.recorder = backend, body_limit, recorder  # recorder: metrics

    def on_post(self, req, resp):
        body = validate.fields(json_body.read_json(req, self.body_limit), SCHEMA)
        name = "texts" if "texts" in body and "documents" not in body else "documents"  # llama-server's order
        for field in ("query", name):
            if field not in body:
                raise bad(field, "required", "missing_required_parameter")
        served = reranker(resolve(self.backend, body.get("model")))
        req.context.model = served.name
        lists = pair_lists(served, [(body["query"], d) for d in body[name]], name)
        scores = [float(v[0]) for v in embed_all(self.backend, served, lists, "rank")]
        n = sum(len(ids) for ids in lists)
        if self.recorder is not None:
            self.recorder.tokens(served.name, n, 0)
        resp.media = _answer(body, name, served.name, scores, n)


def _answer(body, name, model, scores, n_tokens):
    best = sorted(range(len(scores)), key=lambda i: -scores[i])[:body.get("top_n", len(scores))]
    docs = body[name]
    if name == "texts":
        return [{"index": i, "score": scores[i], **({"text": docs[i]} if body.get("return_text") else {})}
                for i in best]
    return {"model": model, "object": "list", "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            "results": [{"index": i, "relevance_score": scores[i],
                         **({"document": {"text": docs[i]}} if body.get("return_documents") else {})}
                        for i in best]}
