"""Next-token sampling along llama.cpp's default chain, with validated, immutable parameters."""

import math
import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional

import numpy as np

from pantheon.engine import sampler_filters as filters
from pantheon.engine import sampling_checks as checks
from pantheon.engine.dry import Dry
from pantheon.engine.infill import MAX_CANDIDATES, infill
from pantheon.errors import InvalidParameter

_SEED_LIMIT = 2**64
_INT32_MAX = 2**31 - 1
_FIRST_SORT = 256  # top_p without top_k: sort this many best tokens first, widen only if mass is short


@dataclass(frozen=True)
class SamplingParams:
    """llama.cpp's knobs and defaults; 0 disables top_k and min_p, 1 disables top_p and repeat_penalty.

    repeat_last_n: how many trailing history tokens the penalties look at (0 = none, -1 = all).
    logit_bias: token id -> value added to its logit; -inf bans the token.
    seed: None draws from OS entropy, so only a given seed reproduces a sequence.
    infill: llama.cpp's infill sampler runs after min_p (pantheon.engine.infill); it needs top_k to
    bound the candidates it compares pairwise.
    top_n_sigma (<= 0 off), typical_p (1 off), xtc_probability (0 off) with xtc_threshold, and
    dynatemp_range (0 off) with dynatemp_exponent are llama.cpp's samplers of those names
    (pantheon.engine.sampler_filters). mirostat 1 or 2 replaces the chain after the logit bias, as in
    llama.cpp: no penalties or filters, the temperature, then mirostat with mirostat_tau and mirostat_eta.
    dry_multiplier (0 off), dry_base, dry_allowed_length and dry_penalty_last_n (-1: the whole context, 0 off)
    are llama.cpp's DRY after the penalties (pantheon.engine.dry); dry_breakers holds its sequence breakers as
    ((head id, tail ids), ...) (pantheon.text.dry_breakers makes them from text).
    min_keep: top_p, min_p, typical_p and XTC keep at least this many tokens (llama.cpp's; 0 and 1 alike).
    min_tokens: vLLM's; the end tokens are banned until this many tokens were generated (the engine masks them).
    allowed_ids: vLLM's allowed_token_ids; only these tokens may be drawn (empty: every token), a mask before
    the bias.
    bad_words: vLLM's; token-id sequences the answer may not make (the engine masks each one's last token while
    the answer ends with the rest: pantheon.engine.bad_words).
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    seed: Optional[int] = None
    infill: bool = False
    top_n_sigma: float = -1.0
    typical_p: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_breakers: tuple = ()
    min_keep: int = 0
    min_tokens: int = 0
    allowed_ids: tuple = ()
    bad_words: tuple = ()

    def __post_init__(self):
        bias = self.logit_bias
        if not isinstance(bias, Mapping):
            raise InvalidParameter(f"logit_bias must map token ids to numbers, got {bias!r}", "logit_bias")
        object.__setattr__(self, "logit_bias", MappingProxyType(dict(bias)))
        object.__setattr__(self, "dry_breakers", checks.breakers(self.dry_breakers))
        object.__setattr__(self, "allowed_ids", checks.token_ids(self.allowed_ids, "allowed_ids"))
        object.__setattr__(self, "bad_words", checks.words(self.bad_words, "bad_words"))
        self.validate()

    def validate(self, n_vocab=None):
        """Raise InvalidParameter naming the first bad field; `n_vocab` also bounds logit_bias ids."""
        checks.real("temperature", self.temperature, low=0.0, divides=True)
        checks.integer("top_k", self.top_k, low=0, high=_INT32_MAX)
        checks.real("top_p", self.top_p, low=0.0, high=1.0)
        checks.real("min_p", self.min_p, low=0.0, high=1.0)
        checks.real("repeat_penalty", self.repeat_penalty, low=0.0, low_open=True, divides=True)
        checks.integer("repeat_last_n", self.repeat_last_n, low=-1, high=_INT32_MAX)
        checks.real("presence_penalty", self.presence_penalty)
        checks.real("frequency_penalty", self.frequency_penalty)
        checks.check_bias(self.logit_bias, n_vocab)
        checks.check_breakers(self.dry_breakers, n_vocab)
        checks.check_ids(self.allowed_ids, n_vocab, "allowed_ids")
        checks.check_ids((t for word in self.bad_words for t in word), n_vocab, "bad_words")
        self._validate_optional()
        if self.seed is not None:
            checks.integer("seed", self.seed, low=0, high=_SEED_LIMIT - 1)
        if self.infill and not 0 < self.top_k <= MAX_CANDIDATES:
            raise InvalidParameter(f"top_k: the infill sampler compares every pair of candidates, so it needs "
                                   f"top_k between 1 and {MAX_CANDIDATES}, got {self.top_k}", "top_k")

    def _validate_optional(self):
        checks.real("top_n_sigma", self.top_n_sigma)
        checks.real("typical_p", self.typical_p, low=0.0, high=1.0)
        checks.real("xtc_probability", self.xtc_probability, low=0.0, high=1.0)
        checks.real("xtc_threshold", self.xtc_threshold, low=0.0, high=1.0)
        checks.real("dynatemp_range", self.dynatemp_range, low=0.0)
        checks.real("dynatemp_exponent", self.dynatemp_exponent, low=0.0)
        checks.integer("mirostat", self.mirostat, low=0, high=2)
        checks.real("mirostat_tau", self.mirostat_tau, low=0.0)
        checks.real("mirostat_eta", self.mirostat_eta, low=0.0)
        if self.mirostat and self.infill:
            raise InvalidParameter("mirostat replaces the sampler chain, the infill sampler with it", "mirostat")
        checks.real("dry_multiplier", self.dry_multiplier, low=0.0)
        checks.real("dry_base", self.dry_base, low=0.0)
        checks.integer("dry_allowed_length", self.dry_allowed_length, low=0, high=_INT32_MAX)
        checks.integer("dry_penalty_last_n", self.dry_penalty_last_n, low=-1, high=_INT32_MAX)
        checks.integer("min_keep", self.min_keep, low=0, high=_INT32_MAX)
        checks.integer("min_tokens", self.min_tokens, low=0, high=_INT32_MAX)

    def dry(self):
        """The DRY sampler these settings ask for, or None (off, or mirostat's chain, which has none)."""
        if self.mirostat or self.dry_multiplier == 0.0 or self.dry_base < 1.0 or self.dry_penalty_last_n == 0:
            return None
        return Dry(self.dry_multiplier, self.dry_base, self.dry_allowed_length, self.dry_penalty_last_n,
                   self.dry_breakers)

    def for_choice(self, choice):
        """Choice `choice` of several sampled from one prompt: seed + choice, so n choices differ and a
        seed reproduces all of them (None stays None)."""
        if choice == 0 or self.seed is None:
            return self
        return dataclasses.replace(self, seed=(self.seed + choice) % _SEED_LIMIT)

    @property
    def greedy(self):
        """Whether the draw is the best adjusted logit: temperature 0 with nothing in the chain that can drop that
        token first. As in llama.cpp, typical_p and XTC run before the temperature and may remove it, dynamic
        temperature spreads 0 into a range, and the infill sampler may end the answer (mirostat runs with none)."""
        if self.temperature != 0.0 or self.infill:
            return False
        return bool(self.mirostat) or (self.typical_p >= 1.0 and self.dynatemp_range <= 0.0 and not self.xtc_acts)

    @property
    def xtc_acts(self):
        """XTC is on: a draw of xtc_probability removes the likely tokens (a threshold above 0.5 removes none)."""
        return self.xtc_probability > 0.0 and self.xtc_threshold <= 0.5

    @property
    def penalizes(self):
        """Whether the repetition penalties change anything (mirostat's chain has none)."""
        return (self.mirostat == 0 and self.repeat_last_n != 0
                and (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0))


class Sampler:
    """Draws token ids for one sequence; owns its numpy Generator, so one seed gives one sequence."""

    def __init__(self, params, n_vocab, piece=None, eog=()):
        """`piece` (token id -> bytes) and `eog` (end-of-generation ids) serve the infill sampler."""
        checks.integer("n_vocab", n_vocab, low=1)
        params.validate(n_vocab)
        self.params = params
        self.n_vocab = n_vocab
        self.piece, self.eog = piece, tuple(eog)
        self.rng = np.random.default_rng(params.seed)
        self._bias_ids = np.fromiter(params.logit_bias.keys(), np.int64, len(params.logit_bias))  # [n_bias]
        self._bias = np.fromiter(params.logit_bias.values(), np.float32, len(params.logit_bias))  # [n_bias]
        self._banned = None
        if params.allowed_ids:
            self._banned = np.ones(n_vocab, bool)  # [n_vocab], True where allowed_ids leave a token out
            self._banned[list(params.allowed_ids)] = False
        self.mirostat = filters.Mirostat(params.mirostat, params.mirostat_tau, params.mirostat_eta,
                                         n_vocab) if params.mirostat else None
        self.dry = params.dry()

    def sample(self, logits, history=()):
        """One token id from `logits` (float32 [n_vocab]) given the ids generated or prompted so far.

        Never raises for valid parameters: where extreme (but valid) penalties or biases overflow
        float32, or every token is banned, it degrades to the greedy token of the finite logits.
        """
        assert logits.shape == (self.n_vocab,), logits.shape
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            adjusted = self.adjust(logits, history)  # [n_vocab]
            top = float(adjusted.max())
            if not math.isfinite(top):
                return greedy_finite(adjusted, logits)
            if self.params.greedy:
                return int(np.argmax(adjusted))
            if self.mirostat is not None:
                return self.mirostat.draw(adjusted / np.float32(self.params.temperature), self.rng)
            ids, kept = self.candidates(adjusted, top)  # [m], [m]
            if self.params.infill:
                return self._after_infill(ids, kept)
            return self._draw(ids, kept, float(kept.max()))

    def _after_infill(self, ids, kept):
        """The infill sampler's survivors drawn from (the best of them when greedy); its end is the first
        end-of-generation id (with none known, the best candidate)."""
        left = infill(ids, kept, self.eog, self.piece)
        if left is None:
            return min(self.eog) if self.eog else int(ids[np.argmax(kept)])
        ids, kept = left  # [r], [r]
        if self.params.temperature == 0.0:
            return int(ids[np.argmax(kept)])
        return self._draw(ids, kept, float(kept.max()))

    def adjust(self, logits, history):
        """allowed_ids' mask, logit bias, repetition penalties, then DRY (llama.cpp's chain order); never writes
        the caller's array."""
        if not self._bias_ids.size and not self.params.penalizes and self.dry is None and self._banned is None:
            return logits
        out = np.array(logits, dtype=np.float32)  # [n_vocab]
        if self._banned is not None:
            out[self._banned] = -np.inf
        if self._bias_ids.size:
            out[self._bias_ids] += self._bias
        if self.params.penalizes:
            self._penalize(out, history)
        if self.dry is not None:
            self.dry.penalize(out, history)
        return out

    def _penalize(self, out, history):
        """llama.cpp: a seen token's logit is divided (if > 0) or multiplied (if <= 0) by repeat_penalty,
        then lowered by count * frequency_penalty + presence_penalty."""
        p = self.params
        window = history if p.repeat_last_n == -1 else history[-p.repeat_last_n:]
        if len(window) == 0:
            return
        tokens, counts = np.unique(np.asarray(window, np.int64), return_counts=True)  # [u], [u]
        inside = (tokens >= 0) & (tokens < self.n_vocab)  # [u]
        tokens, counts = tokens[inside], counts[inside].astype(np.float32)  # [u], [u]
        seen = out[tokens]  # [u]
        rp = np.float32(p.repeat_penalty)
        seen = np.where(seen <= 0, seen * rp, seen / rp)  # [u]
        seen -= counts * np.float32(p.frequency_penalty) + np.float32(p.presence_penalty)
        out[tokens] = seen

    def candidates(self, logits, top):
        """Ids (and logits) surviving llama.cpp's default chain: top_n_sigma, top_k, typical_p, top_p, min_p, xtc.

        top_n_sigma's floor and top_k both keep the best tokens, so either may run first; top_p's mass is
        measured over what they and typical_p left, as llama.cpp renormalizes after each filter; min_p compares
        logits with that pool's maximum, which top_p never removes, so it can run before top_p's sort.
        """
        p, n = self.params, self.n_vocab
        ids = _best_sorted(logits, p.top_k) if 0 < p.top_k < n else None  # [k], None meaning all n
        pool = logits if ids is None else logits[ids]  # [k]
        if p.top_n_sigma > 0.0:
            keep = np.flatnonzero(pool >= np.float32(filters.sigma_floor(logits, top, p.top_n_sigma)))  # [s]
            ids, pool = (keep if ids is None else ids[keep]), pool[keep]  # [s], [s]
        if p.typical_p < 1.0:
            ids, pool = filters.typical(np.arange(n) if ids is None else ids, pool, p.typical_p, p.min_keep)  # [t]
            top = float(pool.max())  # typical sampling may drop the best token
        mass = float(np.exp(pool - np.float32(top)).sum(dtype=np.float64)) if p.top_p < 1.0 else 1.0
        if p.min_p > 0.0:
            keep = np.flatnonzero(pool >= np.float32(top + math.log(p.min_p)))  # [m]
            if keep.size < p.min_keep:
                keep = _best_sorted(pool, min(p.min_keep, pool.size))  # [min_keep]
            ids, pool = (keep if ids is None else ids[keep]), pool[keep]  # [m], [m]
        if ids is None:
            ids = np.arange(n)  # [n]
        if p.top_p < 1.0:
            ids, pool = _nucleus(ids, pool, top, mass, p.top_p, p.min_keep)  # [m], [m]
        if self._xtc_runs(ids.size):
            ids, pool = filters.xtc(ids, pool, p.xtc_threshold, p.min_keep)  # [x], [x]
        return ids, pool

    def _xtc_runs(self, size):
        """XTC acts on a draw of probability xtc_probability, made (as llama.cpp makes it) only where it could."""
        p = self.params
        return p.xtc_acts and size >= 2 and self.rng.random() <= p.xtc_probability

    def _draw(self, ids, kept, top):
        """Temperature last (dynamic within dynatemp_range of it), then one draw from the renormalized survivors."""
        return self.pick(ids, kept, top)[0]

    def pick(self, ids, kept, top):
        """(the drawn id, the survivors' running weight sum it was drawn from; None when it is their best)."""
        cumulative = self.cumulative(kept, top)  # [m]
        if cumulative is None:
            return best(ids, kept), None
        pick = np.searchsorted(cumulative, self.rng.random() * cumulative[-1], side="right")
        return int(ids[min(pick, ids.size - 1)]), cumulative

    def cumulative(self, kept, top):
        """The survivors' running weight sum under the temperature; None where the draw is their best (a
        temperature of 0, or weights that float64 cannot sum)."""
        p = self.params
        temperature = filters.dynamic_temperature(kept, p.temperature, p.dynatemp_range, p.dynatemp_exponent)
        if temperature <= 0.0:
            return None
        weights = np.exp((kept - np.float32(top)) / np.float32(temperature))  # [m]
        cumulative = np.cumsum(weights, dtype=np.float64)  # [m]
        return cumulative if math.isfinite(cumulative[-1]) and cumulative[-1] > 0.0 else None


def without(logits, ids):
    """A copy of `logits` with the tokens `ids` banned (-inf)."""
    out = np.array(logits, dtype=np.float32)  # [n_vocab]
    out[np.fromiter(ids, np.int64, len(ids))] = -np.inf
    return out


def best(ids, kept):
    """The id of the best finite survivor."""
    return int(ids[np.nanargmax(np.where(np.isfinite(kept), kept, -np.inf))])


def greedy_finite(adjusted, raw):
    """The best finite adjusted logit's id; if none is finite, the best finite raw logit's (else 0)."""
    for values in (adjusted, raw):
        finite = np.isfinite(values)  # [n_vocab]
        if finite.any():
            return int(np.argmax(np.where(finite, values, -np.inf)))
    return 0


def _nucleus(ids, pool, top, mass, top_p, min_keep):
    """The smallest best-first prefix whose probability (over `mass`) reaches top_p, and that holds at least
    min_keep tokens (and one)."""
    width = min(max(_FIRST_SORT, min_keep), ids.size)
    while True:
        best = _best_sorted(pool, width)  # [w]
        cumulative = np.cumsum(np.exp(pool[best] - np.float32(top)), dtype=np.float64) / mass  # [w]
        if cumulative[-1] >= top_p or width == ids.size:
            break
        width = min(width * 4, ids.size)
    cut = min(max(int(np.searchsorted(cumulative, top_p, side="left")) + 1, min_keep), width)
    return ids[best[:cut]], pool[best[:cut]]


def _best_sorted(values, width):
    """Indices of the `width` largest values, largest first.

    The smallest of `width` disjoint chunk maxima is at most the width-th largest value, so one cheap
    comparison shrinks the array that argpartition has to select from.
    """
    n = values.size
    if width >= n:
        part = np.arange(n)  # [n]
    else:
        chunk_max = values[: n // width * width].reshape(width, -1).max(axis=1)  # [width]
        part = np.flatnonzero(values >= chunk_max.min())  # [s], s >= width
        if part.size > width:
            part = part[np.argpartition(values[part], part.size - width)[part.size - width:]]  # [width]
    return part[np.argsort(-values[part], kind="stable")]  # [width]
