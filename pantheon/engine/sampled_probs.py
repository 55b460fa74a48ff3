"""llama-server's post_sampling_probs: a token drawn as the sampler draws it, and the distribution it came from."""

import math

import numpy as np

from pantheon.engine.logprobs import TokenLogprob
from pantheon.engine.sampler import best, greedy_finite


def sample_scored(sampler, logits, history, k):
    """(token id, TokenLogprob): the draw `sampler.sample` would make, and the chain's survivors it was drawn
    from, after the filters and the temperature: the token's probability and the k likeliest survivors', as
    logs (a greedy draw: 1 for the token, 0 for the other survivors, as llama.cpp's temperature 0 leaves them).
    Not for mirostat or the infill sampler, which draw by rules of their own."""
    assert not sampler.params.mirostat and not sampler.params.infill
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        adjusted = sampler.adjust(logits, history)  # [n_vocab]
        top = float(adjusted.max())
        if not math.isfinite(top):
            tok = greedy_finite(adjusted, logits)
            return tok, TokenLogprob(tok, 0.0, ((tok, 0.0),)[:k])
        ids, kept = sampler.candidates(adjusted, top)  # [m], [m]
        tok, cumulative = (best(ids, kept), None) if sampler.params.greedy else sampler.pick(ids, kept,
                                                                                            float(kept.max()))
        if cumulative is None:
            probs = (ids == tok).astype(np.float64)  # [m] one-hot
        else:
            probs = np.diff(cumulative, prepend=0.0) / cumulative[-1]  # [m]
        return tok, _scored(tok, ids, probs, kept, k)


def _scored(tok, ids, probs, kept, k):
    """TokenLogprob of `tok` among the survivors `ids` with probabilities `probs`: the k likeliest first (then
    by logit, then by id), each probability as its log (-inf for 0)."""
    order = np.lexsort((ids, -kept, -probs))[:k]  # [<=k]
    logs = np.log(probs)  # [m]
    return TokenLogprob(tok, float(logs[np.flatnonzero(ids == tok)[0]]),
                        tuple((int(ids[i]), float(logs[i])) for i in order))
