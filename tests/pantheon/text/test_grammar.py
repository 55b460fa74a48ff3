"""Constrained decoding: every sampled token keeps the text a prefix of the grammar's language."""

import itertools
import json

import jsonschema
import pytest

from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import DoneEvent, Engine, EngineConfig, Request, TokenEvent
from pantheon.errors import InvalidParameter
from pantheon.text.grammar import GBNF, JSON_SCHEMA, LARK, Constraint, compile_spec
from tests.pantheon.serve.http.server import open_models

ANSWERS = ["yes", "no", "maybe"]
COLOURS = ["red", "green", "blue", "dark blue"]
GRAMMAR = 'root ::= answer ", " colour "!"\nanswer ::= "yes" | "no" | "maybe"\ncolour ::= "red" | "green" | "blue" | "dark blue"'
LANGUAGE = [f"{a}, {c}!" for a, c in itertools.product(ANSWERS, COLOURS)]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
          "required": ["name", "age", "tags"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model():
    return open_models(("qwen2",))["qwen2"]


def run(model, grammar, seed, max_tokens=60, temperature=1.5):
    """Sample under `grammar`; the text after every token, and how the generation ended."""
    tok = model.tokenizer
    engine = Engine(model, EngineConfig(n_ctx=256))
    constraint = Constraint(tok, grammar)
    engine.add(Request(1, tuple(tok.encode("Answer:")), max_tokens, SamplingParams(temperature=temperature, seed=seed,
                                                                                      top_k=0, top_p=1.0, min_p=0.0),
                       frozenset(tok.stop_ids), constraint=constraint))
    ids, texts, reason = [], [], None
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, TokenEvent):
                ids.append(event.token)
                texts.append(tok.decode(ids))
            elif isinstance(event, DoneEvent):
                reason = event.reason
    return texts, reason


@pytest.mark.parametrize("seed", range(6))
def test_every_token_keeps_a_gbnf_prefix(model, seed):
    texts, reason = run(model, compile_spec(GBNF, GRAMMAR), seed)
    for text in texts:
        assert any(s.startswith(text) for s in LANGUAGE), (text, texts)
    assert reason == "stop" and texts[-1] in LANGUAGE


@pytest.mark.parametrize("seed", range(6))
def test_json_schema_answers_validate_and_every_prefix_parses_on(model, seed):
    texts, reason = run(model, compile_spec(JSON_SCHEMA, json.dumps(SCHEMA)), seed, max_tokens=120)
    assert reason == "stop", texts[-1]
    value = json.loads(texts[-1])
    jsonschema.validate(value, SCHEMA)
    assert all(texts[-1].startswith(t) for t in texts)


def test_unconstrained_sampling_leaves_the_language(model):
    """The check can fail: the same sampling without the grammar does not produce the language."""
    tok = model.tokenizer
    engine = Engine(model, EngineConfig(n_ctx=256))
    engine.add(Request(1, tuple(tok.encode("Answer:")), 8, SamplingParams(temperature=1.5, seed=0),
                       frozenset(tok.stop_ids)))
    ids = []
    while engine.has_work:
        ids += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    assert not any(s.startswith(tok.decode(ids)) for s in LANGUAGE)


@pytest.mark.parametrize("kind,text", [(GBNF, "root ::= ("), (JSON_SCHEMA, "{not json"), (LARK, "start: nothing_defined"),
                                       (JSON_SCHEMA, '{"type": "frobnicate"}')])
def test_bad_grammars_are_refused_with_the_field(kind, text):
    with pytest.raises(InvalidParameter) as err:
        compile_spec(kind, text)
    assert err.value.field == kind
