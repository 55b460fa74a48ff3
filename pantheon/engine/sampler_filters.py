"""llama.cpp's optional samplers on candidate arrays: top-n-sigma, typical, XTC, dynamic temperature, mirostat."""

import math

import numpy as np

MIROSTAT_M = 100  # llama.cpp's m: the best tokens mirostat (v1) fits its Zipf exponent to


def softmax(pool):
    """float64 probabilities of float32 logits `pool` (-inf weighs 0)."""
    weights = np.exp(pool.astype(np.float64) - float(pool.max()))  # [m]
    return weights / weights.sum()  # [m]


def sigma_floor(logits, top, n):
    """top-n-sigma: the lowest logit kept, `n` standard deviations of the finite logits under the best one."""
    finite = logits[np.isfinite(logits)]  # [f]
    return top - n * float(finite.astype(np.float64).std())


def typical(ids, pool, mass, min_keep=0):
    """Locally typical sampling: the tokens whose surprise is nearest the distribution's entropy, fewest
    first, until their probability passes `mass` and they are at least `min_keep` (and one)."""
    probs = softmax(pool)  # [m]
    with np.errstate(divide="ignore"):
        surprise = -np.log(probs)  # [m]
    entropy = float(np.sum(np.where(probs > 0, probs * surprise, 0.0)))
    order = np.argsort(np.abs(surprise - entropy), kind="stable")  # [m]
    cumulative = np.cumsum(probs[order])  # [m]
    last = min(max(int(np.searchsorted(cumulative, mass, side="right")) + 1, min_keep), order.size)
    keep = order[:last]  # [r]
    return ids[keep], pool[keep]  # [r], [r]


def xtc(ids, pool, threshold, min_keep=0):
    """Exclude Top Choices: of the tokens at or above `threshold` probability, all but the least likely are
    removed; nothing is when fewer than two reach it, or when fewer than `min_keep` tokens would be left.
    (The caller draws whether XTC runs at all.)"""
    if ids.size < 2 or threshold > 0.5:
        return ids, pool
    probs = softmax(pool)  # [m]
    order = np.argsort(-probs, kind="stable")  # [m]
    above = int(np.count_nonzero(probs >= threshold))
    if above < 2 or ids.size - (above - 1) < min_keep:
        return ids, pool
    keep = order[above - 1:]  # [m - above + 1]
    return ids[keep], pool[keep]


def dynamic_temperature(pool, temperature, spread, exponent):
    """Temperature within temperature +- spread (never below 0), higher the flatter the candidates are:
    their entropy over the largest possible, raised to `exponent`."""
    if spread <= 0.0 or pool.size <= 1:
        return temperature
    probs = softmax(pool)  # [m]
    nonzero = probs[probs > 0]  # [z]
    entropy = float(-np.sum(nonzero * np.log(nonzero)))
    low, high = max(0.0, temperature - spread), temperature + spread
    return low + (high - low) * (entropy / math.log(pool.size)) ** exponent


class Mirostat:
    """Mirostat (v1 or v2): truncates so that the surprise of what is drawn tracks `tau`, learning `mu` at rate
    `eta` from each draw. One per sequence: mu is its state."""

    def __init__(self, version, tau, eta, n_vocab):
        self.version, self.tau, self.eta, self.n_vocab = version, tau, eta, n_vocab
        self.mu = 2.0 * tau

    def draw(self, logits, rng):
        """One token id from float32 `logits` [n_vocab] (temperature already applied); mu learns from it."""
        ids, probs = self._truncated(logits)  # [k], [k]
        pick = min(int(np.searchsorted(np.cumsum(probs), rng.random(), side="right")), ids.size - 1)
        self.mu -= self.eta * (-math.log2(probs[pick]) - self.tau)
        return int(ids[pick])

    def _truncated(self, logits):
        """The surviving ids, best first, and their renormalized probabilities."""
        probs = softmax(logits)  # [n_vocab]
        if self.version == 2:
            ids = np.flatnonzero(probs >= 2.0 ** -self.mu)  # [k]: surprise -log2(p) <= mu
            ids = ids[np.argsort(-probs[ids], kind="stable")] if ids.size else np.array([int(np.argmax(probs))])
        else:
            ids = _best(probs, self._k(probs))  # [k]
        kept = probs[ids]  # [k]
        return ids, kept / kept.sum()

    def _k(self, probs):
        """v1: the top-k that gives surprise mu under the Zipf law fitted to the best MIROSTAT_M tokens."""
        best = probs[_best(probs, min(MIROSTAT_M, probs.size))]  # [m]
        ranks = np.arange(1, best.size, dtype=np.float64)  # [m - 1]
        t = np.log((ranks + 1) / ranks)  # [m - 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.log(best[:-1] / best[1:])  # [m - 1]
            s_hat = float(np.sum(t * b) / np.sum(t * t))
            eps = s_hat - 1.0
            k = (eps * 2.0 ** self.mu / (1.0 - self.n_vocab ** -eps)) ** (1.0 / s_hat)
        if not math.isfinite(k) or k >= probs.size:
            return probs.size
        return max(int(k), 1)


def _best(values, k):
    """Indices of the k largest values, largest first."""
    part = np.argpartition(-values, k - 1)[:k] if k < values.size else np.arange(values.size)  # [k]
    return part[np.argsort(-values[part], kind="stable")]  # [k]
