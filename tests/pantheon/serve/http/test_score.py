"""vLLM's /score: a reranker's pairs scored against the llama.cpp-checked reference through a sigmoid, an
embedding model's by the cosine of its /v1/embeddings vectors, and the pairing rules."""

import math

import numpy as np
import pytest

from tests.pantheon.serve.http.server import call
from tests.pantheon.serve.http.rerank_kit import DOCS, QUERY, TEMPLATE


@pytest.mark.parametrize("route", ["/score", "/v1/score"])
def test_one_text_1_against_every_text_2_scores_as_the_reference_through_a_sigmoid(rerankers, rerank_reference,
                                                                                   route):
    t = rerankers.backend.served("rq").tokenizer
    status, _, body = call(rerankers.port, "POST", route, {"model": "rq", "text_1": QUERY, "text_2": DOCS})
    assert status == 200, body
    ids = [t.encode(TEMPLATE.replace("{query}", QUERY).replace("{document}", d), add_special=False,
                    parse_special=True) for d in DOCS]
    want = [1.0 / (1.0 + math.exp(-rerank_reference("rq", i))) for i in ids]
    assert body["object"] == "list" and body["model"] == "rq" and body["id"].startswith("score-")
    assert body["usage"]["prompt_tokens"] == sum(map(len, ids))
    assert [d["index"] for d in body["data"]] == [0, 1, 2, 3] and {d["object"] for d in body["data"]} == {"score"}
    assert [d["score"] for d in body["data"]] == pytest.approx(want, abs=1e-4)


def test_lists_of_one_length_are_scored_pair_by_pair(rerankers):
    one = lambda q, d: call(rerankers.port, "POST", "/score", {"model": "rq", "text_1": q, "text_2": d})[2]["data"][0]
    status, _, body = call(rerankers.port, "POST", "/score", {"model": "rq", "text_1": [QUERY, "bears"],
                                                           "text_2": DOCS[:2]})
    assert status == 200, body
    assert [d["score"] for d in body["data"]] == pytest.approx([one(QUERY, DOCS[0])["score"],
                                                                one("bears", DOCS[1])["score"]], abs=1e-6)


def test_an_embedding_model_scores_by_the_cosine_of_its_embeddings(rerankers):
    texts = [QUERY] + DOCS[:2]
    vectors = [np.asarray(d["embedding"]) for d in call(rerankers.port, "POST", "/v1/embeddings",
                                                        {"model": "llama", "input": texts})[2]["data"]]
    status, _, body = call(rerankers.port, "POST", "/score", {"model": "llama", "text_1": QUERY, "text_2": DOCS[:2]})
    assert status == 200, body
    want = [float(vectors[0] @ v / np.linalg.norm(vectors[0]) / np.linalg.norm(v)) for v in vectors[1:]]
    assert [d["score"] for d in body["data"]] == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("body, param", [({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_2"),
                                         ({"text_1": "a"}, "text_2"), ({"text_1": [], "text_2": "b"}, "text_1"),
                                         ({"text_1": "a", "text_2": [1]}, "text_2"),
                                         ({"text_1": "a", "text_2": "b", "truncate_prompt_tokens": 5},
                                          "truncate_prompt_tokens"),
                                         ({"text_1": "a", "text_2": "b", "queries": ["x"]}, "queries")])
def test_bad_pairs_are_a_400_naming_the_field(rerankers, body, param):
    status, _, out = call(rerankers.port, "POST", "/score", dict(body, model="rq"))
    assert status == 400 and out["error"]["param"] == param, out
