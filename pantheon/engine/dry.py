"""DRY ("don't repeat yourself"): lowers the tokens that would extend a repetition of the context's end, by a
penalty growing exponentially with the repetition's length (llama.cpp's sampler of that name)."""

import math

import numpy as np

FLOAT_MAX_LOG = 88.7228391  # log of float32's largest value: base ** exponent stays finite under it
QUICK_LENGTH = 32  # matched lengths counted a vectorised pass each; longer ones by the linear Z-algorithm


class Dry:
    """One sequence's DRY settings. `breakers`: ((head id, tail ids), ...), the token sequences that end a
    repetition (a repetition is not followed back across one); a head with no tail is never penalized."""

    def __init__(self, multiplier, base, allowed_length, last_n, breakers=()):
        self.multiplier, self.base, self.allowed, self.last_n = multiplier, base, allowed_length, last_n
        self.tails = {}
        for head, tail in breakers:
            self.tails.setdefault(head, []).append(tuple(tail))
        self.heads = np.fromiter(self.tails, np.int64, len(self.tails))  # [h]
        self.single = np.array([h for h, tails in self.tails.items() if () in tails], np.int64)  # [s]
        self.max_exponent = int(FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else 0

    @property
    def active(self):
        return self.multiplier != 0.0 and self.base >= 1.0 and self.last_n != 0

    def penalize(self, out, history):
        """Lower float32 logits `out` [n_vocab] in place for the tokens that would continue a repetition."""
        window = np.asarray(history if self.last_n < 0 else history[-self.last_n:], np.int64)  # [w]
        if window.size <= self.allowed:
            return
        backwards = window[::-1]  # [w]: the last token first
        limit = self._limit(backwards)
        if limit < self.allowed:
            return
        lengths = _suffix_matches(backwards, limit)  # [w]
        ends = np.flatnonzero(lengths >= self.allowed)  # [e]: earlier ends of the context's final tokens
        tokens, repeats = backwards[ends - 1], lengths[ends]  # [e], [e]: the token that followed each
        inside = (tokens >= 0) & (tokens < out.size) & ~np.isin(tokens, self.single)  # [e]
        if not inside.any():
            return
        ids, where = np.unique(tokens[inside], return_inverse=True)  # [u], [e']
        longest = np.zeros(ids.size, np.int64)  # [u]
        np.maximum.at(longest, where, repeats[inside])
        exponent = longest - self.allowed  # [u]
        if self.max_exponent > 0:
            exponent = np.minimum(exponent, self.max_exponent)  # [u]
        out[ids] -= (self.multiplier * np.power(self.base, exponent.astype(np.float64))).astype(np.float32)

    def _limit(self, backwards):
        """How far back a repetition may reach: up to the most recent complete breaker sequence."""
        for i in np.flatnonzero(np.isin(backwards, self.heads)):  # heads nearest the end first
            fits = [len(t) for t in self.tails[int(backwards[i])] if len(t) <= i
                    and all(t[k] == backwards[i - k - 1] for k in range(len(t)))]
            if fits:
                return int(i) - max(fits)
        return backwards.size


def _suffix_matches(backwards, limit):
    """[w] ints: at k >= 1, how many of the context's final tokens the tokens ending k places earlier repeat
    (at most `limit`); at 0, nothing. A vectorised pass per matched length while they are short (real text);
    past QUICK_LENGTH (a long repeated run, whose passes would cost the window's length squared) the Z-algorithm,
    linear in the window, as llama.cpp computes them."""
    size = backwards.size
    lengths = np.zeros(size, np.int64)  # [w]
    alive = np.arange(1, size)  # [a]: starts still matching
    for j in range(limit):
        if j == QUICK_LENGTH:
            return _z_lengths(backwards, limit)
        alive = alive[alive + j < size]
        alive = alive[backwards[alive + j] == backwards[j]]  # [a']
        if alive.size == 0:
            break
        lengths[alive] += 1
    return lengths


def _z_lengths(backwards, limit):
    """The Z-array of `backwards` (z[k]: the longest common prefix of it and its suffix from k), cut at `limit`."""
    seq, size = backwards.tolist(), backwards.size
    z = [0] * size
    left = right = 0  # the rightmost match found so far: seq[left:right + 1] == seq[:right - left + 1]
    for k in range(1, size):
        if k <= right and z[k - left] < right - k + 1:
            z[k] = z[k - left]
            continue
        end = max(right + 1, k)
        while end < size and seq[end] == seq[end - k]:
            end += 1
        z[k] = end - k
        if end > k:
            left, right = k, end - 1
    return np.minimum(np.array(z, np.int64), limit)  # [w]
