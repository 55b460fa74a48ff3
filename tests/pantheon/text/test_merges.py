"""The shared merge loop: best priority first, ties leftmost, stale heap entries skipped."""

from pantheon.text.merges import merge_symbols


def ranks(table):
    return lambda a, b: table.get(a + b)


def test_best_first_and_leftmost_on_ties():
    # "ab" (rank 0) beats "bc" (rank 1); in "aaa" both pairs tie and the leftmost merges.
    assert merge_symbols("abc", ranks({"ab": 0, "bc": 1})) == ["ab", "c"]
    assert merge_symbols("aaa", ranks({"aa": 0})) == ["aa", "a"]


def test_merges_build_on_merges_and_skip_stale_pairs():
    table = {"ab": 0, "bc": 1, "abc": 2, "cd": 3}
    # after "ab", the queued "bc" is stale; "abc" merges next, and "cd" can no longer form.
    assert merge_symbols("abcd", ranks(table)) == ["abc", "d"]


def test_nothing_to_merge():
    assert merge_symbols("", ranks({})) == [] and merge_symbols("x", ranks({})) == ["x"]
    assert merge_symbols("xy", ranks({})) == ["x", "y"]
