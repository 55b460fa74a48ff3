"""llama.cpp's infill sampler: for fill-in-the-middle, end early or keep only the confident candidates."""

import numpy as np

MAX_CANDIDATES = 256  # it compares every pair of candidates, so top_k must bound them (SamplingParams)
_KEEP = np.float32(0.2)  # a non-end candidate needs this much probability after merging
_DOMINANT_END = 3  # end when this x the end tokens' probability x the candidates outweighs the text's


def infill(ids, logits, eog, piece):
    """The candidates the next draw picks from, or None when the answer should end here.

    `ids`, `logits`: the survivors of the filters before it; `eog`: the end-of-generation ids; `piece`:
    token id -> its bytes. As llama.cpp: (1) if the end tokens are likely enough, only they remain;
    (2) a candidate whose text begins another's takes the other's probability (the likelier of the two
    keeps both, the other is dropped); (3) text candidates under 0.2 go, and None if none is left;
    (4) renormalized, text candidates under 1 / (text candidates + 1) go. End tokens are always kept.
    The draw that follows weighs the survivors by their own logits (merged ones are -inf), as
    llama.cpp's dist sampler recomputes them."""
    order = np.argsort(-logits, kind="stable")  # [m] llama.cpp sorts by logit first
    ids, logits = ids[order], np.array(logits[order], dtype=np.float32)  # [m], [m]
    p = _softmax(logits)  # [m]
    end = np.isin(ids, np.fromiter(eog, np.int64, len(eog)))  # [m]
    if _DOMINANT_END * p[end].sum(dtype=np.float32) * ids.size > p[~end].sum(dtype=np.float32):
        return ids[end], logits[end]
    _merge_prefixes(ids, logits, p, piece)
    keep = end | (p >= _KEEP)  # [m]
    texts = int((keep & ~end).sum())
    if texts == 0:
        return None
    p = np.where(keep, p, np.float32(0)) / p[keep].sum(dtype=np.float32)  # [m]
    keep &= end | (p >= np.float32(1.0 / (texts + 1)))
    return ids[keep], logits[keep]


def _softmax(logits):
    finite = np.isfinite(logits)  # [m]
    if not finite.any():
        return np.zeros_like(logits)  # [m]
    w = np.exp(np.where(finite, logits - logits[finite].max(), -np.inf))  # [m], 0 where -inf
    return (w / w.sum(dtype=np.float32)).astype(np.float32)  # [m]


def _merge_prefixes(ids, logits, p, piece):
    """In place, in llama.cpp's order: for each candidate i0 still alive, every other live i1 whose text
    starts with i0's (non-empty) text is merged into whichever of the two is likelier."""
    texts = [piece(int(t)) for t in ids]
    m = len(texts)
    for i0 in range(m):
        for i1 in range(m):
            if logits[i0] == -np.inf:
                break
            if i0 == i1 or logits[i1] == -np.inf:
                continue
            a, b = texts[i0], texts[i1]
            if a and b.startswith(a):
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] += p[src]
                p[src], logits[src] = 0, -np.inf
