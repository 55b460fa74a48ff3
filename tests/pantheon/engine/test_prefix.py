"""The prefix store alone: chained block hashes, longest match, superseding, LRU eviction (sessions last)."""

from pantheon.engine.prefix import PrefixStore, block_hashes


class Cache:
    """Just the token ids a KV cache was computed from (the store reads nothing else)."""

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def __len__(self):
        return len(self.tokens)

    def common_prefix(self, tokens):
        n = 0
        for a, b in zip(self.tokens, tokens):
            if a != b:
                break
            n += 1
        return n


def test_block_hashes_chain_on_the_parent_block():
    a = block_hashes(list(range(40)), block=8)
    b = block_hashes(list(range(40)), block=8)
    c = block_hashes([99] + list(range(1, 40)), block=8)
    assert a == b and len(a) == 5  # only full blocks
    assert all(x != y for x, y in zip(a, c))  # a change in block 0 changes every later hash


def test_match_finds_the_longest_prefix_and_needs_a_full_block():
    store = PrefixStore(4, block=4)
    short, long_ = Cache(range(10)), Cache([0, 1, 2, 3, 4, 5, 6, 7, 50, 51])
    store.put(short)
    store.put(long_)
    cache, n = store.match(list(range(9)) + [77])
    assert cache is short and n == 9
    cache, n = store.match([0, 1, 2, 3, 4, 5, 6, 7, 50, 99])
    assert cache is long_ and n == 9
    assert store.match([0, 1, 2]) == (None, 0)  # no full block in common: nothing to reuse
    assert store.match([9, 1, 2, 3, 4]) == (None, 0)


def test_an_extension_replaces_the_cache_it_extends():
    store = PrefixStore(4, block=4)
    store.put(Cache(range(8)))
    longer = Cache(range(12))
    store.put(longer)
    assert len(store) == 1 and store.match(list(range(12)))[0] is longer
    store.put(Cache(range(6)))  # already held by `longer`
    assert len(store) == 1


def test_capacity_evicts_least_recently_used_anonymous_before_sessions():
    store = PrefixStore(2, block=4)
    store.put(Cache([1] * 8), session="s")
    a, b = Cache([2] * 8), Cache([3] * 8)
    store.put(a)
    store.put(b)  # over capacity: the anonymous a goes, the older session stays
    assert store.sessions == ["s"] and store.match([2] * 8) == (None, 0) and store.match([3] * 8)[0] is b
    assert store.evict_one(spare=b) and store.sessions == []  # b is spared, so the session goes
    assert not store.evict_one(spare=b)
    assert store.take_session("s") is None and len(store) == 1


def test_a_session_takes_its_cache_back_and_others_copy_from_it():
    store = PrefixStore(2, block=4)
    mine = Cache(range(8))
    store.put(mine, session="s")
    assert store.match(list(range(8)))[0] is mine  # anyone may copy from it
    assert store.take_session("s") is mine and len(store) == 0
    assert store.match(list(range(8))) == (None, 0)
