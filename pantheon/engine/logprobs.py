"""Log-probabilities of chosen tokens: log_softmax of the model's own logits, and the best alternatives."""

from dataclasses import dataclass

import numpy as np

MAX_TOP = 20  # alternatives per token: OpenAI's chat limit, and what vLLM accepts on completions


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability under the model's distribution and the `k` likeliest tokens there.

    top: ((token id, logprob), ...) best first; ties go to the smaller id.
    rank: how many tokens are at least as likely, itself included (vLLM's rank: 1 for the best); 0 where it
    was not counted (only scored prompt tokens carry it, in the PROMPT_LOGPROBS frame).
    """

    token: int
    logprob: float
    top: tuple = ()
    rank: int = 0


def log_softmax(logits):
    """float64 [n_vocab] log-probabilities of float32 logits; -inf logits stay -inf."""
    x = np.asarray(logits, dtype=np.float64)  # [n_vocab]
    finite = x[np.isfinite(x)]  # [m]
    peak = finite.max() if finite.size else 0.0
    return x - (peak + np.log(np.exp(finite - peak).sum()))  # [n_vocab]


def token_logprob(logits, token, k, ranked=False):
    """TokenLogprob of `token` with the `k` (0..MAX_TOP) best alternatives, from raw float32 logits; `ranked`
    also counts its rank (a vocabulary-wide pass that only a scored prompt token carries to the front)."""
    lp = log_softmax(logits)  # [n_vocab]
    rank = int(np.count_nonzero(lp >= lp[token])) if ranked else 0
    return TokenLogprob(int(token), float(lp[token]), _top(lp, k), rank)


def _top(lp, k):
    if k <= 0:
        return ()
    k = min(k, lp.size)
    part = np.argpartition(-lp, k - 1)[:k]  # [k] unordered
    best = part[np.lexsort((part, -lp[part]))]  # [k] by logprob, then id
    return tuple((int(i), float(lp[i])) for i in best)
