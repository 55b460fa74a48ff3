"""StopMatcher: cut at the earliest stop string, hold back what could still become one, release the rest."""

import random

from pantheon.serve.http.stops import StopMatcher


def feed(stops, pieces):
    m = StopMatcher(stops)
    out = [m.push(p) for p in pieces]
    return out, m.flush(), m.matched


def reference(stops, pieces):
    """Generation stops once a piece completes any stop string; the text ends where the earliest
    complete one begins (a longer stop that started earlier but is still unfinished does not count)."""
    text = ""
    for piece in pieces:
        text += piece
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return text[:min(hits)]
    return text


def test_stop_spanning_pieces_is_cut_and_never_emitted():
    out, tail, matched = feed(["STOP"], ["He", "llo ST", "O", "P rest"])
    assert out == ["He", "llo ", "", ""] and tail == "" and matched == "STOP"


def test_earliest_of_several_stops_wins():
    out, _, matched = feed(["world", "lo w"], ["Hello world"])
    assert out == ["Hel"] and matched == "lo w"


def test_overlapping_prefix_releases_only_what_cannot_match():
    out, _, matched = feed(["aab"], ["a", "a", "a", "b"])
    assert out == ["", "", "a", ""] and matched == "aab"


def test_unfinished_prefix_is_released_at_the_end():
    out, tail, matched = feed(["aab"], ["abc", "aa"])
    assert out == ["abc", ""] and tail == "aa" and matched is None


def test_nothing_after_a_match():
    m = StopMatcher(["x"])
    assert m.push("axb") == "a" and m.push("more") == "" and m.flush() == ""


def random_case(rng):
    """(stop strings, pieces of a text) over a small alphabet, so that matches and near-matches are common."""
    text = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 30)))
    stops = ["".join(rng.choice("abc ") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 4))]
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 8))))
    return stops, [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])]


def test_random_texts_match_the_reference_and_never_leak():
    rng = random.Random(5)
    for _ in range(400):
        stops, pieces = random_case(rng)
        text = "".join(pieces)
        want = reference(stops, pieces)
        out, tail, _ = feed(stops, pieces)
        sent = ""
        for part in out:
            sent += part
            assert want.startswith(sent), (text, stops, pieces)
        assert sent + tail == want, (text, stops, pieces)


def test_with_include_the_text_ends_with_the_stop_string_it_matched():
    """vLLM's include_stop_str_in_output, against the reference cut moved past the earliest stop string."""
    m = StopMatcher(["STOP"], include=True)
    assert [m.push(p) for p in ["He", "llo ST", "O", "P rest"]] == ["He", "llo ", "", "STOP"] and m.flush() == ""
    rng = random.Random(9)
    for _ in range(400):
        stops, pieces = random_case(rng)
        text = want = "".join(pieces)
        seen = ""
        for piece in pieces:
            seen += piece
            hits = [(seen.find(s), s) for s in stops if s in seen]
            if hits:
                at, stop = min(hits, key=lambda h: h[0])
                want = seen[:at + len(stop)]
                break
        m = StopMatcher(stops, include=True)
        assert "".join(m.push(p) for p in pieces) + m.flush() == want, (text, stops, pieces)


def held_reference(stops, held, pieces):
    """vLLM's min_tokens: no stop string is looked for in the text of the `held` pieces; afterwards the text
    ends at the earliest stop string that ends past them (one may begin inside them)."""
    text = "".join(held)
    floor = len(text)
    for piece in pieces:
        text += piece
        hits = [i for i in (text.find(s, max(0, floor - len(s) + 1)) for s in stops) if i >= 0]
        if hits:
            return text[:min(hits)]
    return text


def feed_held(stops, held, pieces):
    m = StopMatcher(stops)
    return "".join([m.hold(p) for p in held] + [m.push(p) for p in pieces]) + m.flush()


def test_a_held_stop_string_is_not_matched_but_one_spanning_past_the_held_text_is():
    assert feed_held(["STOP"], ["a STOP b ST"], ["OP c"]) == "a STOP b "
    assert feed_held(["b", "abc"], ["ab"], ["", "x"]) == "abx"  # "b" lies wholly in the held text
    assert feed_held(["b", "abc"], ["ab"], ["c", "x"]) == ""


def test_random_held_texts_match_vllms_window():
    rng = random.Random(7)
    for _ in range(400):
        stops = ["".join(rng.choice("ab ") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        held = ["".join(rng.choice("ab ") for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(0, 3))]
        pieces = ["".join(rng.choice("ab ") for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(0, 4))]
        assert feed_held(stops, held, pieces) == held_reference(stops, held, pieces), (stops, held, pieces)
