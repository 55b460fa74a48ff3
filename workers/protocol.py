"""What Pantheon's processes say to each other over the rings: request records and their codes."""

import array
import struct
from dataclasses import dataclass

from ipc import messages
from ipc.errors import FrameError
from pantheon.engine.logprobs import TokenLogprob
from pantheon.engine.sampler import SamplingParams

# SUBMIT's routing record after the sampling struct and prompt ids; it ends with repeat_last_n (int32,
# -1 = whole history), the one sampling field the fixed Sampling struct has no room for, and logprobs
# (int32, -1 = none, else the alternatives per token).
_ROUTE = struct.Struct("<HHQIIIHHii")
_BIAS = struct.Struct("<If")
_DONE = struct.Struct("<BxxxIII")
_SCORE = struct.Struct("<dI")  # TOKENS after the token id: its logprob, then how many alternatives follow
_ALT = struct.Struct("<Id")  # one alternative: token id, logprob
FLAG_RANDOM_SEED = 1
FRONT_SHIFT = 48

REASONS = ("stop", "length", "abort")

# ERROR codes (ipc ERROR frames, detail is UTF-8 text or a number as text).
E_WORKER_DIED = 1
E_OVERLOADED = 2
E_UNAVAILABLE = 3
E_UNKNOWN_MODEL = 4
E_BAD_REQUEST = 5
E_INTERNAL = 6

# Worker exit codes: a worker that cannot boot its model says so instead of crash-looping.
EXIT_OK = 0
EXIT_BAD_MODEL = 3
EXIT_OUT_OF_MEMORY = 4


def request_id(front, counter):
    """Request ids carry their front's index so a worker knows which ring answers it."""
    return (front << FRONT_SHIFT) | (counter & ((1 << FRONT_SHIFT) - 1))


def front_of(rid):
    return rid >> FRONT_SHIFT


@dataclass(frozen=True)
class Job:
    """A generation as it travels front -> supervisor -> die: token ids, never text."""

    slot: int
    front: int
    prompt: tuple
    max_tokens: int
    params: SamplingParams
    stop_ids: tuple = ()
    session: int = 0  # 64-bit hash of the session id; 0 = none
    reasoning_budget: int = 0
    think_ids: tuple = (0, 0)
    grammar: str = ""  # a compiled llguidance grammar the reply must follow; "" = none
    grammar_replay: int = 0  # trailing prompt tokens already generated under the grammar (a resumed stream)
    logprobs: int = -1  # -1: none; k: each token's logprob and its k best alternatives come back


def encode_job(job):
    p = job.params
    sampling = messages.Sampling(job.max_tokens, p.top_k, p.temperature, p.top_p, p.min_p, p.repeat_penalty,
                                 p.presence_penalty, p.frequency_penalty, p.seed or 0,
                                 FLAG_RANDOM_SEED if p.seed is None else 0)
    bias = sorted(p.logit_bias.items())
    route = _ROUTE.pack(job.slot, job.front, job.session, job.reasoning_budget, *job.think_ids,
                        len(job.stop_ids), len(bias), p.repeat_last_n, job.logprobs)
    extra = b"".join((route, array.array("I", job.stop_ids).tobytes(),
                      b"".join(_BIAS.pack(int(k), float(v)) for k, v in bias), _grammar_blob(job)))
    return messages.encode_submit(sampling, job.prompt, extra)


def _grammar_blob(job):
    """`replay` newline grammar, after the biases; nothing when there is no grammar."""
    return f"{job.grammar_replay}\n{job.grammar}".encode() if job.grammar else b""


def decode_job(body):
    sub = messages.decode_submit(body)
    extra = sub.extra
    if len(extra) < _ROUTE.size:
        raise FrameError(f"SUBMIT routing record of {len(extra)} bytes < {_ROUTE.size}")
    slot, front, session, budget, t_open, t_close, n_stop, n_bias, last_n, logprobs = _ROUTE.unpack_from(extra)
    end_stop = _ROUTE.size + 4 * n_stop
    end_bias = end_stop + _BIAS.size * n_bias
    if end_bias > len(extra):
        raise FrameError(f"SUBMIT routing record of {len(extra)} bytes does not hold {n_stop} stops, {n_bias} biases")
    stops = array.array("I", extra[_ROUTE.size:end_stop])
    bias = {i: b for i, b in _BIAS.iter_unpack(extra[end_stop:end_bias])}
    replay, grammar = _read_grammar(bytes(extra[end_bias:]))
    s = sub.sampling
    params = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                            repeat_penalty=s.repeat_penalty, repeat_last_n=last_n, presence_penalty=s.presence_penalty,
                            frequency_penalty=s.frequency_penalty, logit_bias=bias,
                            seed=None if s.flags & FLAG_RANDOM_SEED else s.seed)
    return Job(slot, front, tuple(sub.prompt), s.max_tokens, params, tuple(stops), session, budget,
               (t_open, t_close), grammar, replay, logprobs)


def _read_grammar(blob):
    if not blob:
        return 0, ""
    head, sep, grammar = blob.partition(b"\n")
    if not sep or not head.isdigit():
        raise FrameError("SUBMIT grammar record is malformed")
    try:
        return int(head), grammar.decode()
    except UnicodeDecodeError:
        raise FrameError("SUBMIT grammar is not UTF-8") from None


def encode_token(token, scored=None):
    """TOKENS body: the id (u32), then with logprobs its logprob and the alternatives (id, logprob)."""
    body = int(token).to_bytes(4, "little")
    if scored is None:
        return body
    return b"".join((body, _SCORE.pack(scored.logprob, len(scored.top)), *(_ALT.pack(t, lp) for t, lp in scored.top)))


def decode_token(body):
    """(token id, TokenLogprob or None) of a TOKENS body."""
    if len(body) < 4:
        raise FrameError(f"TOKENS body of {len(body)} bytes < 4")
    token = int.from_bytes(body[:4], "little")
    if len(body) == 4:
        return token, None
    if len(body) < 4 + _SCORE.size:
        raise FrameError(f"TOKENS body of {len(body)} bytes holds a partial logprob")
    logprob, k = _SCORE.unpack_from(body, 4)
    if len(body) != 4 + _SCORE.size + k * _ALT.size:
        raise FrameError(f"TOKENS body of {len(body)} bytes does not hold {k} alternatives")
    top = tuple(_ALT.iter_unpack(body[4 + _SCORE.size:]))
    return token, TokenLogprob(token, logprob, top)


def encode_done(reason, prompt_tokens, cached_tokens, completion_tokens):
    return _DONE.pack(REASONS.index(reason), prompt_tokens, cached_tokens, completion_tokens)


def decode_done(body):
    if len(body) != _DONE.size:
        raise FrameError(f"DONE body of {len(body)} bytes, expected {_DONE.size}")
    reason, prompt, cached, completion = _DONE.unpack(body)
    if reason >= len(REASONS):
        raise FrameError(f"DONE reason {reason} unknown")
    return REASONS[reason], prompt, cached, completion
