"""Checks of SamplingParams' values: each refusal an InvalidParameter naming the field."""

import math
import numbers
import operator

import numpy as np

from pantheon.errors import InvalidParameter

_F32 = np.finfo(np.float32)
# Python floats, so comparing a huge client value never casts it to float32 (an overflow warning)
_F32_MAX, _F32_TINY = float(_F32.max), float(_F32.tiny)


def real(name, value, low=None, high=None, low_open=False, divides=False):
    """A finite number inside float32's range; `divides`: zero or a normal float32, never a denormal."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InvalidParameter(f"{name} must be a finite number, got {value!r}", name)
    if abs(value) > _F32_MAX:
        raise InvalidParameter(f"{name} must be within float32's range (|x| <= {_F32_MAX:.7g}), got {value!r}", name)
    if divides and 0 < abs(value) < _F32_TINY:
        raise InvalidParameter(f"{name} must be 0 or at least {_F32_TINY:.7g} (a divisor), got {value!r}", name)
    if low is not None and (value < low or (low_open and value == low)):
        raise InvalidParameter(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}", name)
    if high is not None and value > high:
        raise InvalidParameter(f"{name} must be <= {high}, got {value!r}", name)


def integer(name, value, low=None, high=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}", name)
    if low is not None and value < low:
        raise InvalidParameter(f"{name} must be >= {low}, got {value!r}", name)
    if high is not None and value > high:
        raise InvalidParameter(f"{name} must be <= {high}, got {value!r}", name)


def check_bias(bias, n_vocab):
    for token, value in bias.items():
        try:
            token = operator.index(token)
        except TypeError:
            raise InvalidParameter(f"logit_bias keys must be token ids, got {token!r}", "logit_bias") from None
        if token < 0 or (n_vocab is not None and token >= n_vocab):
            raise InvalidParameter(f"logit_bias token id {token} is outside [0, {n_vocab})", "logit_bias")
        bad = isinstance(value, bool) or not isinstance(value, numbers.Real)
        if bad or math.isnan(value) or value == math.inf or (value != -math.inf and abs(value) > _F32_MAX):
            raise InvalidParameter(f"logit_bias[{token}] must be a float32 number or -inf, got {value!r}",
                                   "logit_bias")


def breakers(value):
    """DRY's breakers as a tuple of (head id, tuple of tail ids); InvalidParameter for any other shape."""
    try:
        return tuple((operator.index(head), tuple(operator.index(t) for t in tail)) for head, tail in value)
    except (TypeError, ValueError):
        raise InvalidParameter(f"dry_breakers must be (head id, tail ids) pairs, got {value!r}"[:300],
                               "dry_sequence_breakers") from None


def token_ids(value, name):
    try:
        return tuple(operator.index(t) for t in value)
    except TypeError:
        raise InvalidParameter(f"{name} must be token ids, got {value!r}"[:300], name) from None


def check_ids(ids, n_vocab, name):
    """Every id inside the vocabulary (`n_vocab` None: only not negative)."""
    for token in ids:
        if token < 0 or (n_vocab is not None and token >= n_vocab):
            raise InvalidParameter(f"{name} token id {token} is outside [0, {n_vocab})", name)


def check_breakers(breakers, n_vocab):
    for head, tail in breakers:
        check_ids((head, *tail), n_vocab, "dry_sequence_breakers")


def words(value, name):
    """Token-id sequences (a tuple of non-empty tuples of ids)."""
    try:
        out = tuple(tuple(operator.index(t) for t in word) for word in value)
    except TypeError:
        raise InvalidParameter(f"{name} must be sequences of token ids, got {value!r}"[:300], name) from None
    if not all(out):
        raise InvalidParameter(f"{name} must not hold an empty sequence", name)
    return out
