"""The merge loop SPM and BPE share: adjacent symbols joined best-first, ties leftmost, as llama.cpp does."""

import heapq


def merge_symbols(symbols, priority):
    """Merge a list of str symbols; priority(a, b) is a sortable key (lowest merges first), or None when
    a + b is not a merge. Symbols live in a linked list, so a merge never shifts the others."""
    syms = list(symbols)
    n = len(syms)
    if n < 2:
        return syms
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    heap = []

    def push(left, right):
        if left >= 0 and right >= 0:
            key = priority(syms[left], syms[right])
            if key is not None:
                heapq.heappush(heap, (key, left, right, syms[left] + syms[right]))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, left, right, text = heapq.heappop(heap)
        if not syms[left] or not syms[right] or syms[left] + syms[right] != text:
            continue  # a stale entry: one side has merged with something else since
        syms[left], syms[right] = text, ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        push(prv[left], left)
        push(left, nxt[left])
    return [s for s in syms if s]
