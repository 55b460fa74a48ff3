"""/v1/rerank (and llama-server's /rerank, /reranking): scores of golden-model rerankers against their
llama.cpp-checked hidden states through the head rows, the Jina and TEI shapes, and every refusal."""

from types import SimpleNamespace

import pytest

from pantheon.serve.http.rerank import pair_ids
from tests.pantheon.serve.http.rerank_kit import DOCS, QUERY, TEMPLATE
from tests.pantheon.serve.http.server import call


@pytest.fixture(scope="module")
def served(rerankers):
    return rerankers


@pytest.fixture(scope="module")
def score(rerank_reference):
    return rerank_reference


def tok(served, name):
    return served.backend.served(name).tokenizer




@pytest.mark.parametrize("route", ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"])
def test_documents_come_back_best_first_with_llama_servers_shape(served, score, route):
    t = tok(served, "rq")
    status, _, body = call(served.port, "POST", route, {"model": "rq", "query": QUERY, "documents": DOCS})
    assert status == 200, body
    ids = [t.encode(TEMPLATE.replace("{query}", QUERY).replace("{document}", d), add_special=False,
                    parse_special=True) for d in DOCS]
    want = [score("rq", i) for i in ids]
    assert body["object"] == "list" and body["model"] == "rq"
    assert body["usage"] == {"prompt_tokens": sum(map(len, ids)), "total_tokens": sum(map(len, ids))}
    assert [r["index"] for r in body["results"]] == sorted(range(4), key=lambda i: -want[i])
    for r in body["results"]:
        assert set(r) == {"index", "relevance_score"}
        assert abs(r["relevance_score"] - want[r["index"]]) < 1e-3


def test_top_n_cuts_and_return_documents_echoes_them_as_objects_are_read(served, score):
    status, _, body = call(served.port, "POST", "/v1/rerank",
                           {"model": "rq", "query": QUERY, "documents": [{"text": d} for d in DOCS],
                            "top_n": 2, "return_documents": True})
    assert status == 200, body
    assert len(body["results"]) == 2
    for r in body["results"]:
        assert r["document"] == {"text": DOCS[r["index"]]}
    _, _, full = call(served.port, "POST", "/v1/rerank", {"model": "rq", "query": QUERY, "documents": DOCS})
    assert [r["index"] for r in body["results"]] == [r["index"] for r in full["results"][:2]]


def test_texts_answer_in_teis_shape(served):
    status, _, body = call(served.port, "POST", "/rerank",
                           {"model": "rq", "query": QUERY, "texts": DOCS[:3], "return_text": True})
    assert status == 200, body
    assert isinstance(body, list) and sorted(r["index"] for r in body) == [0, 1, 2]
    assert all(set(r) == {"index", "score", "text"} and r["text"] == DOCS[r["index"]] for r in body)
    assert [r["score"] for r in body] == sorted((r["score"] for r in body), reverse=True)


def test_a_model_without_a_rerank_template_scores_bos_query_document(served, score):
    """llama-server's fallback: BOS query [EOS] [SEP] document [EOS], as the vocabulary adds them (this
    one adds BOS only); a llama-architecture reranker reads the first row, so every score is the same."""
    t = tok(served, "rl")
    assert pair_ids(served.backend.served("rl"), QUERY, DOCS[0]) == (
        [t.bos_id] + t.encode(QUERY, add_special=False) + t.encode(DOCS[0], add_special=False))
    status, _, body = call(served.port, "POST", "/v1/rerank", {"model": "rl", "query": QUERY, "documents": DOCS})
    assert status == 200, body
    want = score("rl", [t.bos_id])
    assert all(abs(r["relevance_score"] - want) < 1e-3 * max(1.0, abs(want)) for r in body["results"])


def test_the_fallback_adds_eos_and_sep_where_the_vocabulary_says_so():
    """BOS query EOS SEP document EOS in llama-server's order; no EOS id: the SEP id stands in."""
    def encode(text, add_special=True):
        return [ord(c) for c in text]
    tok = SimpleNamespace(add_bos=True, add_eos=True, add_sep=True, bos_id=1, eos_id=2, sep_id=3, encode=encode)
    served = SimpleNamespace(tokenizer=tok, rerank_template="")
    assert pair_ids(served, "q", "dd") == [1, ord("q"), 2, 3, ord("d"), ord("d"), 2]
    tok.eos_id, tok.add_bos = None, False
    assert pair_ids(served, "q", "d") == [ord("q"), 3, 3, ord("d"), 3]


def test_the_template_is_filled_in_one_pass(served):
    """A query that contains "{document}" is text, not a second placeholder."""
    s, t = served.backend.served("rq"), tok(served, "rq")
    got = pair_ids(s, "a {document} b", "doc")
    assert got == t.encode("Judge.", add_special=False) + [t.eos_id] + t.encode(
        "Query: a {document} b\nDocument: doc\nAnswer:", add_special=False)


@pytest.mark.parametrize("body, says", [
    ({"model": "llama", "query": "q", "documents": ["d"]}, "not a reranker"),
    ({"model": "rq", "documents": ["d"]}, "query"),
    ({"model": "rq", "query": "q"}, "documents"),
    ({"model": "rq", "query": "q", "documents": []}, "documents"),
    ({"model": "rq", "query": "q", "documents": "d"}, "documents"),
    ({"model": "rq", "query": "q", "documents": ["d", 3]}, "documents"),
    ({"model": "rq", "query": "q", "documents": [{"title": "d"}]}, "documents"),
    ({"model": "rq", "query": 5, "documents": ["d"]}, "query"),
    ({"model": "rq", "query": "q", "documents": ["d"], "top_n": 0}, "top_n"),
    ({"model": "rq", "query": "q", "documents": ["d"], "return_documents": "yes"}, "return_documents"),
    ({"model": "rq", "query": "q", "documents": ["d"], "temperature": 1}, "temperature"),
    ({"model": "rq", "query": "q", "documents": ["d"] * 2049}, "documents"),
])
def test_bad_bodies_are_a_400_naming_the_field(served, body, says):
    status, _, got = call(served.port, "POST", "/v1/rerank", body)
    assert status == 400, got
    assert says in got["error"]["message"] or says == got["error"].get("param"), got


def test_a_pair_longer_than_the_context_is_refused_before_any_runs(served):
    status, _, got = call(served.port, "POST", "/v1/rerank",
                          {"model": "rq", "query": "q", "documents": ["short", "word " * 400]})
    assert status == 400 and "documents[1]" in got["error"]["message"], got


def test_a_reranker_does_not_embed(served):
    status, _, got = call(served.port, "POST", "/v1/embeddings", {"model": "rq", "input": "hello"})
    assert status == 400 and "/v1/rerank" in got["error"]["message"], got
