"""IndentLimit against llama-server's n_indent rule, worked by hand and by a whole-text reference."""

import random

from pantheon.serve.http.indent import IndentLimit


def reference(text, minimum):
    """The text llama-server keeps: the first line is free; a later line whose first non-space/tab
    character (its newline included) comes after fewer than `minimum` of them is cut before it."""
    lines = text.split("\n")
    kept = [lines[0]]
    for line in lines[1:]:
        body = line.lstrip(" \t")
        indent = len(line) - len(body)
        if indent < minimum and (body or len(kept) < len(lines) - 1):
            return "\n".join(kept) + "\n" + line[:indent], True
        kept.append(line)
    return text, False


def feed(pieces, minimum):
    limit = IndentLimit(minimum)
    return "".join(limit.push(p) for p in pieces), limit.cut


def test_a_line_indented_less_is_cut_before_its_first_character():
    assert feed(["x = 1\n    y = 2\n  z"], 4) == ("x = 1\n    y = 2\n  ", True)
    assert feed(["def f():\n", "\tif a:\n", "\t\tb\n", "\tc\n", "d"], 1) == ("def f():\n\tif a:\n\t\tb\n\tc\n", True)


def test_the_first_line_is_never_checked_and_a_blank_line_cuts():
    assert feed(["}", " more"], 8) == ("} more", False)
    assert feed(["    a\n", "\n", "    b"], 4) == ("    a\n", True)


def test_nothing_passes_after_the_cut():
    limit = IndentLimit(2)
    assert limit.push("a\nb c") == "a\n" and limit.push("  d\n  e") == "" and limit.cut


def test_random_texts_in_random_pieces_match_the_reference():
    rng = random.Random(7)
    for _ in range(2000):
        text = "".join(rng.choice("ab \t\n") for _ in range(rng.randint(0, 30)))
        minimum = rng.randint(1, 4)
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 6))))
        pieces = [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])]
        assert feed(pieces, minimum) == reference(text, minimum), (text, minimum)
