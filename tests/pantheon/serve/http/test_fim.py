"""Fill-in-the-middle prompts, and /v1/completions' `suffix` that asks for one."""

import json

import pytest
from gguf import GGUFValueType

import pantheon
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.fim import fim_prompt
from tests.conftest import shared_path
from tests.ggufcraft import rewrite
from tests.pantheon.serve.http.server import Served, call, greedy_ids

PRE, SUF, MID = 4093, 4094, 4095  # FIM ids given to the golden qwen2 model by llama.cpp's GGUF keys
PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"


class _FimTok:
    fim_ids = {"fim_pre": 100, "fim_suf": 101, "fim_mid": 102, "fim_sep": 103}

    @staticmethod
    def encode(text, add_special=False, parse_special=False):
        return [ord(c) for c in text]


def test_fim_prompt_is_prefix_suffix_middle_with_extra_files():
    ids = fim_prompt(_FimTok, [1], "ab", "c", [{"filename": "x", "text": "y"}], "d")
    assert ids == [1, 103, ord("x"), 10, ord("y"), 100, ord("a"), ord("b"), 101, ord("c"), 102, ord("d")]
    with pytest.raises(RequestError) as err:
        fim_prompt(type("NoFim", (), {"fim_ids": dict.fromkeys(_FimTok.fim_ids)}), [], "a", "b", param="suffix")
    assert err.value.param == "suffix"


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    """The golden qwen2 model with FIM token ids in its GGUF (its vocabulary has no FIM texts), served, and the
    token ids of PREFIX's fill before SUFFIX, built by hand."""
    path = tmp_path_factory.mktemp("fim") / "coder.gguf"
    rewrite(shared_path("golden", "qwen2-q8_0.gguf"), path, set_keys={
        f"tokenizer.ggml.fim_{role}_token_id": (tid, GGUFValueType.UINT32)
        for role, tid in (("pre", PRE), ("suf", SUF), ("mid", MID))})
    served = Served({"coder": pantheon.open_model(str(path), threads=1), "qwen2": open_plain()})
    tok = pantheon.open_model(str(path), threads=1).tokenizer
    ids = (tok.encode("", add_special=True) + [PRE] + tok.encode(PREFIX, add_special=False) + [SUF]
           + tok.encode(SUFFIX, add_special=False) + [MID])
    yield served, path, ids
    served.close()


def open_plain():
    return pantheon.open_model(str(shared_path("golden", "qwen2-q8_0.gguf")), threads=1)


def test_suffix_fills_the_gap_between_prompt_and_suffix(coder):
    """The answer is the engine's greedy continuation of [BOS] PRE prompt SUF suffix MID, as with /infill and
    Ollama's suffix; streamed the same, and through OpenAI's client (its `suffix` argument)."""
    served, path, ids = coder
    want = greedy_ids(pantheon.open_model(str(path), threads=1), ids, 6, 256)
    body = {"model": "coder", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 6, "temperature": 0}
    status, _, out = call(served.port, "POST", "/v1/completions", body)
    assert status == 200, out
    tok = served.backend.served("coder").tokenizer
    assert out["choices"][0]["text"] == tok.decode(want) and out["usage"]["prompt_tokens"] == len(ids)
    status, _, text = call(served.port, "POST", "/v1/completions", dict(body, stream=True))
    chunks = [json.loads(b[6:]) for b in text.split("\n\n") if b.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == out["choices"][0]["text"]
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    got = client.completions.create(model="coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=6, temperature=0)
    assert got.choices[0].text == out["choices"][0]["text"]


def test_without_suffix_the_prompt_is_a_plain_continuation(coder):
    served, path, ids = coder
    status, _, out = call(served.port, "POST", "/v1/completions", {"model": "coder", "prompt": PREFIX,
                                                                  "suffix": None, "max_tokens": 6, "temperature": 0})
    assert status == 200 and out["usage"]["prompt_tokens"] < len(ids) - 2


@pytest.mark.parametrize("body, param, code", [
    ({"model": "qwen2", "prompt": PREFIX, "suffix": SUFFIX}, "suffix", "not_supported"),
    ({"model": "coder", "prompt": PREFIX, "suffix": SUFFIX, "echo": True}, "suffix", "invalid_value"),
    ({"model": "coder", "prompt": [1, 2, 3], "suffix": SUFFIX}, "prompt", "invalid_type"),
    ({"model": "coder", "prompt": PREFIX, "suffix": 7}, "suffix", "invalid_type"),
])
def test_a_fill_that_cannot_be_made_is_a_400_naming_why(coder, body, param, code):
    status, _, out = call(coder[0].port, "POST", "/v1/completions", dict(body, max_tokens=2))
    assert status == 400 and (out["error"]["param"], out["error"]["code"]) == (param, code), out
