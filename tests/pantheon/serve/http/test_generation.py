"""Generation: a backend stream as text, ended by a stop string, the stream's end or t_max_predict_ms."""

import time

from pantheon.serve.http.backend import Finished, Tokens
from pantheon.serve.http.generation import Generation

PIECES = ["a", "b\n", "c", "d\ne", "f\n", "g"]  # token id i spells PIECES[i]


class _Tok:
    def token_bytes(self, tid, special=False):
        return PIECES[tid].encode()


class _Stream:
    """Tokens events one id each, with `pauses[i]` seconds before id i; after cancel() only a Finished."""

    def __init__(self, pauses=None):
        self.pauses = pauses or {}
        self.cancelled = False
        self._events = self._run()

    def _run(self):
        for i in range(len(PIECES)):
            time.sleep(self.pauses.get(i, 0))
            if self.cancelled:
                break
            yield Tokens(ids=(i,), seq=i)
        yield Finished("abort" if self.cancelled else "length", 3, 0, len(PIECES))

    def __iter__(self):
        return self._events

    def cancel(self):
        self.cancelled = True


class _OneEvent(_Stream):
    """Every id in a single Tokens event, as a busy backend hands several ids to the front at once."""

    def _run(self):
        yield Tokens(ids=tuple(range(len(PIECES))), seq=0)
        yield Finished("length", 3, 0, len(PIECES))


def test_without_a_limit_every_piece_comes():
    gen = Generation(_Stream({2: 0.05}), _Tok())
    assert "".join(gen.pieces()) == "".join(PIECES) and gen.finish_reason == "length"


def test_the_limit_ends_at_the_first_newline_after_it_passed():
    """b's newline comes before the limit; c has none; d's newline ends it, d's token included."""
    stream = _Stream({2: 0.3})
    gen = Generation(stream, _Tok(), predict_limit=0.1)
    assert "".join(gen.pieces()) == "ab\ncd\ne"
    assert gen.finish_reason == "length" and stream.cancelled
    assert gen.usage["completion_tokens"] == 4 and gen.usage["prompt_tokens"] == 3


def test_the_limit_never_ends_before_it_passed():
    gen = Generation(_Stream(), _Tok(), predict_limit=30)
    assert "".join(gen.pieces()) == "".join(PIECES) and gen.finish_reason == "length"


def test_text_held_for_a_stop_string_is_released_when_the_limit_ends_it():
    """"e" could begin the stop string "ef!": held back, then sent when the time limit ends the text."""
    gen = Generation(_Stream({3: 0.3}), _Tok(), stops=["ef!"], predict_limit=0.1)
    out = list(gen.pieces())
    assert "".join(out) == "ab\ncd\ne" and gen.finish_reason == "length"


def test_a_stop_string_still_wins_over_the_limit():
    gen = Generation(_Stream({3: 0.3}), _Tok(), stops=["d"], predict_limit=0.1)
    assert "".join(gen.pieces()) == "ab\nc" and gen.finish_reason == "stop"


def test_ids_after_the_one_that_ended_the_answer_are_not_counted():
    """n_indent 1 cuts before "c" (a line indented 0); a stop string "d" ends on id 3. The ids that came
    in the same event after those were not part of the answer: not counted, not returned."""
    gen = Generation(_OneEvent(), _Tok(), min_indent=1)
    assert "".join(gen.pieces()) == "ab\n" and gen.finish_reason == "length"
    assert (gen.tokens, gen.token_ids, gen.usage["completion_tokens"]) == (3, [0, 1, 2], 3)
    gen = Generation(_OneEvent(), _Tok(), stops=["d"])
    assert "".join(gen.pieces()) == "ab\nc" and gen.finish_reason == "stop"
    assert (gen.tokens, gen.token_ids, gen.usage["completion_tokens"]) == (4, [0, 1, 2, 3], 4)


def test_without_an_end_every_id_of_a_many_id_event_is_counted():
    gen = Generation(_OneEvent(), _Tok())
    assert "".join(gen.pieces()) == "".join(PIECES) and gen.tokens == len(PIECES) == gen.usage["completion_tokens"]


def test_min_tokens_skips_a_stop_string_in_its_tokens_but_not_one_that_ends_after_them():
    """vLLM: the first min_tokens tokens' text is not searched, but a stop string may begin in it."""
    inside = Generation(_Stream(), _Tok(), stops=["b\n"], min_tokens=2)
    assert "".join(inside.pieces()) == "".join(PIECES) and inside.finish_reason == "length"
    spanning = Generation(_Stream(), _Tok(), stops=["\nc"], min_tokens=2)
    assert "".join(spanning.pieces()) == "ab" and spanning.finish_reason == "stop"
    assert spanning.usage["completion_tokens"] == 3
