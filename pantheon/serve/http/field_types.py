"""One JSON field's value checked against the type the engine holds it in, or a 400 naming the field."""

import json
import math

from pantheon.serve.http.errors import RequestError

F32_MAX = 3.4028234663852886e38   # the largest finite float32: the sampler computes in float32
F32_TINY = 1.1754943508222875e-38  # the smallest normal float32: a divisor below it overflows
INT32_MAX = 2**31 - 1              # token ids, top_k, repeat_last_n and max_tokens cross the ring as int32
MAX_TOP_LOGPROBS = 20              # alternatives per token (OpenAI's chat limit; vLLM's on completions too)
MAX_CHOICES = 128                  # OpenAI's bound on n; a model's own (its --batch-slots) is checked later
_SHOWN = 80                        # characters of an offending value quoted in an error message


def bad(name, message, code="invalid_type"):
    """The 400 for field `name`: its message and an OpenAI error code."""
    return RequestError(f"{name}: {message}", param=name, code=code)


def show(v):
    """`v` as JSON for an error message, cut short: a refused value may be megabytes long."""
    if isinstance(v, str):
        v = v[:_SHOWN + 1]
    text = json.dumps(v) if not isinstance(v, (dict, list)) else type(v).__name__
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number(name, v):
    """A finite number that float32, the sampler's type, represents without overflowing."""
    if not _is_number(v):
        raise bad(name, f"expected a number, got {show(v)}")
    if abs(v) > F32_MAX:
        raise bad(name, f"{show(v)} is beyond the float32 range (|x| <= {F32_MAX:.7g})", "invalid_value")
    return float(v)


def divisor(name, v):
    """A number the sampler divides by: 0 or a normal float32 (a denormal's quotient overflows)."""
    v = number(name, v)
    if 0 < abs(v) < F32_TINY:
        raise bad(name, f"{show(v)} is too small: a non-zero value must be at least {F32_TINY:.7g}",
                  "invalid_value")
    return v


def integer(name, v, low=-INT32_MAX - 1, high=INT32_MAX):
    """An integer in low..high (an integral float such as 40.0 counts)."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(name, f"expected an integer, got {show(v)}")
    if not low <= v <= high:
        raise bad(name, f"must be in {low}..{high}, got {show(v)}", "invalid_value")
    return v


def positive(name, v):
    return integer(name, v, 1)


def top_k(name, v):
    """0 or -1 (vLLM's spelling, llama.cpp's too) leave top_k off."""
    return max(integer(name, v, -1), 0)


def last_n(name, v):
    return integer(name, v, -1)


def boolean(name, v):
    if not isinstance(v, bool):
        raise bad(name, f"expected true or false, got {show(v)}")
    return v


def string(name, v):
    if not isinstance(v, str):
        raise bad(name, f"expected a string, got {show(v)}")
    return v


def seed(name, v):
    """Any 64-bit integer, signed or not, as OpenAI allows; negative seeds wrap to the unsigned range."""
    return integer(name, v, -2**63, 2**64 - 1) % 2**64



def known_object(where, v, keys):
    """`v` when it is an object whose every key is in `keys`; else a 400 naming `where` or the key."""
    if not isinstance(v, dict):
        raise bad(where, "expected an object")
    for key in v:
        if key not in keys:
            raise bad(f"{where}.{key}", "unknown field", "unknown_field")
    return v


def only(value, why):
    """A field accepted at one value (the one that changes nothing: what the server does when it is absent);
    any other is a 400 unsupported_value saying `why` (None: only null, which a body's fields drop)."""
    def check(name, v):
        if type(v) is not type(value) or v != value:
            raise bad(name, f"{why} (got {show(v)}; send {json.dumps(value)} or omit it)", "unsupported_value")
        return v
    return check
