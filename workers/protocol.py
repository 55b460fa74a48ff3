"""The wire protocol between Pantheon's processes: message kinds, the job codec and every typed body.

ipc/ moves opaque frames (a kind byte, a request id, a sequence number, bytes); this module alone says
what each kind means and how its body is laid out. Bodies are fixed little-endian structs plus arrays of
token ids: never text to be tokenized, never pickles. Each kind has one meaning and one body layout.
"""

import array
import dataclasses
import enum
import struct
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ipc.errors import FrameError
from pantheon.engine.logprobs import TokenLogprob
from pantheon.engine.sampler import SamplingParams
from pantheon.gguf.config import EMBED_KINDS
from pantheon.errors import InvalidParameter
from pantheon.serve.http.backend import Finished
from pantheon.serve.routing import prefix_key

assert sys.byteorder == "little", "token arrays are sent in native order"

FRONT_SHIFT = 48


class Kind(enum.IntEnum):
    """Every message kind, who sends it to whom, and its body."""

    SUBMIT = 1       # front -> supervisor -> die: a Job (routing header first)
    CANCEL = 2       # front -> supervisor -> die: stop request `rid`; empty, or one choice (u16) of it
    TOKENS = 3       # die -> front: one token of one choice; seq = its index in that choice's completion,
                     # with the prompt tokens that choice took from a cache
    DONE = 4         # die -> front: one choice ended (a Finished record); die -> supervisor: the request
                     # ended (its final DONE), as a notice that its place is free
    ERROR = 5        # supervisor or die -> front: the request ended; an ErrorBody
    ACCEPTED = 6     # supervisor -> front: started on a die, or queued; an Accepted record
    ADMIN_LOAD = 7   # front -> supervisor: an admin load request, the HTTP body as JSON
    ADMIN_UNLOAD = 8  # front -> supervisor: an admin unload request, the HTTP body as JSON
    ADMIN_REPLY = 9  # supervisor -> front: {"status": HTTP status, "body": JSON body}
    LOAD_SLOT = 10   # supervisor -> die: load model slot (u16)
    UNLOAD_SLOT = 11  # supervisor -> die: drop model slot (u16); its requests end with UNAVAILABLE
    SLOT_FAILED = 12  # die -> supervisor: model slot (u16) could not be loaded, then the reason (UTF-8)
    FREE_CACHES = 13  # supervisor -> die: memory pressure, drop idle sessions' prefix caches; empty
    EMBEDDING = 14   # die -> front: a piece of an embedding job's float32 values (seq = index of its first
                     # value), the pieces in order, before its DONE
    PROMPT_LOGPROBS = 15  # die -> front: scored prompt tokens (seq = the first one's position), before TOKENS


class ErrorCode(enum.IntEnum):
    """Why a request ended with ERROR (never an HTTP status: the front maps these)."""

    WORKER_DIED = 1   # the die running it exited; the front may resubmit it
    OVERLOADED = 2    # every replica busy and the queue full
    UNAVAILABLE = 3   # no live replica, memory pressure CRITICAL, or the model unloaded
    BAD_REQUEST = 4   # the die refused the job (malformed, or its engine refused it)
    CANCELLED = 5     # cancelled while it waited in the queue
    INTERNAL = 6      # the engine failed on this request (never resubmitted; the die lives on)


# Worker exit codes: a worker that cannot boot its model says so instead of crash-looping.
EXIT_OK = 0
EXIT_BAD_MODEL = 3
EXIT_OUT_OF_MEMORY = 4

REASONS = ("stop", "length", "abort")
QUEUED = 255  # Accepted.die of a request waiting for a free place
MAX_DETAIL = 2000  # bytes of error detail text carried

_ROUTE = struct.Struct("<HH4xQQ")  # slot, choices, session, prefix key: all the dispatcher reads of a job
_JOB = struct.Struct("<qqqqQddddddIIIIIIqIqq")
# llama.cpp's optional samplers' settings, after the job header (mirostat's version rides in the flags)
_OPTIONAL_REALS = ("top_n_sigma", "typical_p", "xtc_probability", "xtc_threshold", "dynatemp_range",
                   "dynatemp_exponent", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base")
_OPTIONAL = _OPTIONAL_REALS + ("dry_allowed_length", "dry_penalty_last_n", "min_keep", "min_tokens")
# ... then how many u32 words DRY's breakers take after the bias ids: per breaker its tail's length, head, tail
# ... how many allowed ids (vLLM's allowed_token_ids) follow the breakers, and how many u32 words vLLM's bad_words
# take after them (per word its length, then its ids)
_SAMPLERS = struct.Struct("<" + "d" * len(_OPTIONAL_REALS) + "q" * (len(_OPTIONAL) - len(_OPTIONAL_REALS)) + "III")
_FLAG_RANDOM_SEED = 1
_FLAG_THINK = 2
_FLAG_INFILL = 4
_EMBED_SHIFT = 3  # flag bits 3-5: 0 a generation, else 1 + the kind's index in EMBED_KINDS
_MIROSTAT_SHIFT = 6  # flag bits 6-7: the mirostat version (0 off)
_FLAG_POST_SAMPLING = 256
_FLAG_PRIVATE = 512
_DONE = struct.Struct("<BBHIIIi")  # reason, final, choice, prompt, cached, completion tokens, stop token (-1)
_TOKEN = struct.Struct("<IHI")  # token id, choice, prompt tokens served from a cache
_CHOICE = struct.Struct("<H")
_SCORE = struct.Struct("<dI")  # TOKENS after the token id: its logprob, then how many alternatives follow
_ALT = struct.Struct("<Id")  # one alternative: token id, logprob
_SCORED = struct.Struct("<IdII")  # a scored prompt token: id, logprob, rank, how many alternatives follow
_ERROR = struct.Struct("<HxxdI")
_ACCEPTED = struct.Struct("<B")
_SLOT = struct.Struct("<H")
_U32 = 4


def request_id(front, counter):
    """Request ids carry their front's index so a worker knows which ring answers it."""
    return (front << FRONT_SHIFT) | (counter & ((1 << FRONT_SHIFT) - 1))


def front_of(rid):
    return rid >> FRONT_SHIFT


# ---- the job


@dataclass(frozen=True)
class Job:
    """A generation as it travels front -> supervisor -> die: every field of the HTTP layer's
    GenerationRequest, with the model named by its slot and the session by its 64-bit hash."""

    slot: int
    prompt: tuple
    max_tokens: int
    params: SamplingParams
    stop_ids: tuple = ()
    session: int = 0  # 64-bit hash of the session id; 0 = none
    reasoning_budget: int = 0
    think_ids: tuple = ()  # (open, close) ids of <think> and </think>, or () when the vocabulary has none
    grammar: str = ""  # a compiled llguidance grammar the reply must follow; "" = none
    grammar_replay: int = 0  # trailing prompt tokens already generated under the grammar (a resumed stream)
    logprobs: Optional[int] = None  # None: none; k: each token's logprob and its k best alternatives come back
    n: int = 1  # choices sampled from one prompt prefill; each takes a place in the die's batch
    embed: Optional[str] = None  # an embedding job's pooling (pantheon.gguf.config.EMBED_KINDS)
    prompt_logprobs: Optional[int] = None  # None: none; k: each prompt token's logprob and k alternatives
    post_sampling: bool = False  # logprobs from the distribution the sampler drew from (post_sampling_probs)
    private: bool = False  # shares no kept KV cache (pantheon.engine.scheduler.Request.private)


@dataclass(frozen=True)
class Route:
    """The fixed header at the front of every job: what the dispatcher routes on. `prefix`: a hash of
    the prompt's leading blocks (pantheon.serve.routing.prefix_key), for cache affinity without a session;
    `n`: the job's choices, the places it takes on a die."""

    slot: int
    session: int
    prefix: int = 0
    n: int = 1


def encode_job(job):
    """SUBMIT body; InvalidParameter when a value does not fit its wire field."""
    p = job.params
    bias = sorted(p.logit_bias.items())
    flags = ((_FLAG_RANDOM_SEED if p.seed is None else 0) | (_FLAG_THINK if job.think_ids else 0)
             | (_FLAG_INFILL if p.infill else 0) | _embed_bits(job.embed) | p.mirostat << _MIROSTAT_SHIFT
             | (_FLAG_POST_SAMPLING if job.post_sampling else 0) | (_FLAG_PRIVATE if job.private else 0))
    think = job.think_ids or (0, 0)
    grammar = job.grammar.encode("utf-8")
    breakers = [word for head, tail in p.dry_breakers for word in (len(tail), head, *tail)]
    bad = [t for word in p.bad_words for t in (len(word), *word)]
    try:
        head = _ROUTE.pack(job.slot, job.n, job.session, prefix_key(job.prompt)) + _JOB.pack(
            job.max_tokens, p.top_k, p.repeat_last_n, job.reasoning_budget, p.seed or 0, p.temperature, p.top_p,
            p.min_p, p.repeat_penalty, p.presence_penalty, p.frequency_penalty, *think, len(job.prompt),
            len(job.stop_ids), len(bias), flags, job.grammar_replay, len(grammar),
            -1 if job.logprobs is None else job.logprobs, -1 if job.prompt_logprobs is None else job.prompt_logprobs
        ) + _SAMPLERS.pack(*(getattr(p, name) for name in _OPTIONAL), len(breakers), len(p.allowed_ids), len(bad))
        ids = array.array("I", (*job.prompt, *job.stop_ids, *(int(k) for k, _ in bias), *breakers, *p.allowed_ids,
                                *bad))
    except (struct.error, OverflowError, TypeError) as e:
        raise InvalidParameter(f"a request value does not fit the wire format: {e}", None) from None
    return b"".join((head, ids.tobytes(), array.array("d", (float(v) for _, v in bias)).tobytes(), grammar))


def _embed_bits(embed):
    if embed is None:
        return 0
    if embed not in EMBED_KINDS:
        raise InvalidParameter(f"pooling {embed!r} is not one of {', '.join(EMBED_KINDS)}", None)
    return (EMBED_KINDS.index(embed) + 1) << _EMBED_SHIFT


def _embed_of(flags):
    code = flags >> _EMBED_SHIFT & 7
    if code > len(EMBED_KINDS):
        raise FrameError(f"SUBMIT pooling code {code} unknown")
    return EMBED_KINDS[code - 1] if code else None


def read_route(body):
    """The routing header alone (the dispatcher forwards the rest unread)."""
    if len(body) < _ROUTE.size:
        raise FrameError(f"SUBMIT body of {len(body)} bytes < its {_ROUTE.size}-byte routing header")
    slot, n, session, prefix = _ROUTE.unpack_from(body)
    return Route(slot, session, prefix, n)


def decode_job(body):
    """The Job in a SUBMIT body; FrameError when the layout is broken, InvalidParameter for bad values."""
    route = read_route(body)
    if len(body) < _ROUTE.size + _JOB.size + _SAMPLERS.size:
        raise FrameError(f"SUBMIT body of {len(body)} bytes < {_ROUTE.size + _JOB.size + _SAMPLERS.size}")
    (max_tokens, top_k, last_n, budget, seed, temperature, top_p, min_p, repeat, presence, frequency,
     t_open, t_close, n_prompt, n_stop, n_bias, flags, replay, n_grammar, logprobs, prompt_lp) = _JOB.unpack_from(
        body, _ROUTE.size)
    *settings, n_dry, n_allowed, n_bad = _SAMPLERS.unpack_from(body, _ROUTE.size + _JOB.size)
    start = _ROUTE.size + _JOB.size + _SAMPLERS.size
    n_ids = n_prompt + n_stop + n_bias + n_dry + n_allowed + n_bad
    end_bias = start + n_ids * _U32 + n_bias * 8
    if end_bias + n_grammar != len(body):
        raise FrameError(f"SUBMIT body of {len(body)} bytes does not hold {n_prompt} prompt ids, {n_stop} stop "
                         f"ids, {n_bias} biases, {n_dry} DRY words, {n_allowed} allowed ids, {n_bad} bad-words "
                         f"words and a {n_grammar}-byte grammar")
    ids = array.array("I", body[start:start + n_ids * _U32])
    values = array.array("d", body[start + n_ids * _U32:end_bias])
    try:
        grammar = bytes(body[end_bias:]).decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError("SUBMIT grammar is not UTF-8") from None
    bias = dict(zip(ids[n_prompt + n_stop:n_prompt + n_stop + n_bias], values))
    optional = dict(zip(_OPTIONAL, settings), **_id_lists(ids[n_ids - n_bad - n_allowed - n_dry:], n_dry, n_allowed))
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat,
                            repeat_last_n=last_n, presence_penalty=presence, frequency_penalty=frequency,
                            logit_bias=bias, seed=None if flags & _FLAG_RANDOM_SEED else seed,
                            infill=bool(flags & _FLAG_INFILL), mirostat=flags >> _MIROSTAT_SHIFT & 3, **optional)
    return Job(route.slot, tuple(ids[:n_prompt]), max_tokens, params, tuple(ids[n_prompt:n_prompt + n_stop]),
               route.session, budget, (t_open, t_close) if flags & _FLAG_THINK else (), grammar, replay,
               None if logprobs < 0 else logprobs, route.n, _embed_of(flags), None if prompt_lp < 0 else prompt_lp,
               bool(flags & _FLAG_POST_SAMPLING), bool(flags & _FLAG_PRIVATE))


def _id_lists(words, n_dry, n_allowed):
    """The sampler's id lists at the end of a SUBMIT's ids: DRY's breakers, allowed ids, then bad words."""
    return {"dry_breakers": _breakers(words[:n_dry]), "allowed_ids": tuple(words[n_dry:n_dry + n_allowed]),
            "bad_words": _words(words[n_dry + n_allowed:])}


def _breakers(words):
    """DRY's breakers from their u32 words (tail length, head, tail ...)."""
    out, at = [], 0
    while at < len(words):
        size = words[at]
        if at + 2 + size > len(words):
            raise FrameError(f"SUBMIT DRY breaker at word {at} claims a {size}-token tail past the end")
        out.append((words[at + 1], tuple(words[at + 2:at + 2 + size])))
        at += 2 + size
    return tuple(out)


def _words(words):
    """vLLM's bad_words from their u32 words (length, ids ...)."""
    out, at = [], 0
    while at < len(words):
        size = words[at]
        if size == 0 or at + 1 + size > len(words):
            raise FrameError(f"SUBMIT bad word at word {at} claims {size} tokens (none, or past the end)")
        out.append(tuple(words[at + 1:at + 1 + size]))
        at += 1 + size
    return tuple(out)


def one_choice(job, choice):
    """Choice `choice` of an n-choice job as a job of its own, sampled as the die samples that choice."""
    return dataclasses.replace(job, params=job.params.for_choice(choice), n=1)


def continuation(job, sent):
    """The job resubmitted after its worker died: the prompt extended by the tokens already delivered
    (the prompt's logprobs, asked for, were delivered before the first of them)."""
    return dataclasses.replace(job, prompt=job.prompt + tuple(sent), max_tokens=job.max_tokens - len(sent),
                               grammar_replay=len(sent), prompt_logprobs=None)


# ---- results and refusals


def encode_token(token, scored=None, choice=0, cached=0):
    """TOKENS body: the id (u32), its choice (u16) and the choice's cached prompt tokens (u32), then
    with logprobs its logprob and the alternatives (id, logprob)."""
    body = _TOKEN.pack(token, choice, cached)
    if scored is None:
        return body
    return b"".join((body, _SCORE.pack(scored.logprob, len(scored.top)), *(_ALT.pack(t, lp) for t, lp in scored.top)))


def decode_token(body):
    """(token id, TokenLogprob or None, choice, cached prompt tokens) of a TOKENS body."""
    if len(body) < _TOKEN.size:
        raise FrameError(f"TOKENS body of {len(body)} bytes < {_TOKEN.size}")
    token, choice, cached = _TOKEN.unpack_from(body)
    if len(body) == _TOKEN.size:
        return token, None, choice, cached
    if len(body) < _TOKEN.size + _SCORE.size:
        raise FrameError(f"TOKENS body of {len(body)} bytes holds a partial logprob")
    logprob, k = _SCORE.unpack_from(body, _TOKEN.size)
    if len(body) != _TOKEN.size + _SCORE.size + k * _ALT.size:
        raise FrameError(f"TOKENS body of {len(body)} bytes does not hold {k} alternatives")
    top = tuple(_ALT.iter_unpack(body[_TOKEN.size + _SCORE.size:]))
    return token, TokenLogprob(token, logprob, top), choice, cached


def encode_done(reason, prompt_tokens, cached_tokens, completion_tokens, choice=0, final=True, stop_token=-1):
    """DONE body: how choice `choice` ended (and on which end token, -1 if none); `final` on the request's last
    (every choice has ended)."""
    return _DONE.pack(REASONS.index(reason), bool(final), choice, prompt_tokens, cached_tokens, completion_tokens,
                      stop_token)


def decode_done(body):
    """(Finished, final) of a DONE body."""
    if len(body) != _DONE.size:
        raise FrameError(f"DONE body of {len(body)} bytes, expected {_DONE.size}")
    reason, final, choice, prompt, cached, completion, stop_token = _DONE.unpack(body)
    if reason >= len(REASONS):
        raise FrameError(f"DONE reason {reason} unknown")
    if stop_token < -1:
        raise FrameError(f"DONE stop token {stop_token} is not a token id")
    return Finished(REASONS[reason], prompt, cached, completion, choice, stop_token), bool(final)


def encode_prompt_scores(scores):
    """PROMPT_LOGPROBS body: per scored prompt token its id, logprob, rank and alternatives (id, logprob)."""
    return b"".join(b"".join((_SCORED.pack(s.token, s.logprob, s.rank, len(s.top)),
                              *(_ALT.pack(t, lp) for t, lp in s.top))) for s in scores)


def decode_prompt_scores(body):
    """The TokenLogprobs of a PROMPT_LOGPROBS body, in order."""
    out, at = [], 0
    while at < len(body):
        if len(body) - at < _SCORED.size:
            raise FrameError(f"PROMPT_LOGPROBS body of {len(body)} bytes ends inside an entry")
        token, logprob, rank, k = _SCORED.unpack_from(body, at)
        at += _SCORED.size + k * _ALT.size
        if at > len(body):
            raise FrameError(f"PROMPT_LOGPROBS body of {len(body)} bytes does not hold {k} alternatives")
        top = tuple(_ALT.iter_unpack(body[at - k * _ALT.size:at]))
        out.append(TokenLogprob(token, logprob, top, rank))
    if not out:
        raise FrameError("PROMPT_LOGPROBS body holds no entry")
    return tuple(out)


EMBEDDING_PIECE = 1 << 18  # float32 values per EMBEDDING message (1 MiB): pooling none's vectors of a long
                           # prompt exceed one ring message (4 MiB holds 256 tokens of a 4,096-wide model)
_EMBED_TOTAL = struct.Struct("<I")


def embedding_pieces(vector, piece=EMBEDDING_PIECE):
    """(seq, body) of each EMBEDDING message of `vector` (every position's, row by row, for pooling none):
    seq is the index of the piece's first value; a body is the total value count (u32), then the values."""
    flat = np.ascontiguousarray(vector, np.float32).reshape(-1)  # [total]
    assert 0 < flat.size < 1 << 32, "an embedding has values, and a u32 counts them"
    head = _EMBED_TOTAL.pack(flat.size)
    return [(at, head + flat[at:at + piece].tobytes()) for at in range(0, flat.size, piece)]


def decode_embedding(body):
    """(total value count, this piece's float32 values as an array) of an EMBEDDING body."""
    n = len(body) - _EMBED_TOTAL.size
    if n <= 0 or n % 4:
        raise FrameError(f"EMBEDDING body of {len(body)} bytes is not a count and whole float32 values")
    (total,) = _EMBED_TOTAL.unpack_from(body)
    values = array.array("f", body[_EMBED_TOTAL.size:])
    if total < len(values):
        raise FrameError(f"EMBEDDING piece of {len(values)} values is longer than its vector ({total})")
    return total, values


def encode_cancel(choice=None):
    """CANCEL body: empty for the whole request, else the one choice to stop."""
    return b"" if choice is None else _CHOICE.pack(choice)


def decode_cancel(body):
    """The choice a CANCEL body names, or None for the whole request."""
    if not body:
        return None
    if len(body) != _CHOICE.size:
        raise FrameError(f"CANCEL body of {len(body)} bytes, expected 0 or {_CHOICE.size}")
    return _CHOICE.unpack(body)[0]


@dataclass(frozen=True)
class ErrorBody:
    """Why a request ended: a code, seconds after which a retry may succeed (0: no hint), a message."""

    code: ErrorCode
    retry_after: float
    detail: str


def encode_error(code, detail, retry_after=0.0):
    text = detail.encode("utf-8")[:MAX_DETAIL]
    return _ERROR.pack(int(ErrorCode(code)), retry_after, len(text)) + text


def decode_error(body):
    if len(body) < _ERROR.size:
        raise FrameError(f"ERROR body of {len(body)} bytes < {_ERROR.size}")
    code, retry_after, n = _ERROR.unpack_from(body)
    if _ERROR.size + n != len(body):
        raise FrameError(f"ERROR body of {len(body)} bytes does not hold {n} detail bytes")
    try:
        code = ErrorCode(code)
    except ValueError:
        raise FrameError(f"ERROR code {code} unknown") from None
    return ErrorBody(code, retry_after, bytes(body[_ERROR.size:]).decode("utf-8", "replace"))


def encode_accepted(die):
    """ACCEPTED body: the die index the request started on, or QUEUED."""
    return _ACCEPTED.pack(die)


def decode_accepted(body):
    if len(body) != _ACCEPTED.size:
        raise FrameError(f"ACCEPTED body of {len(body)} bytes, expected {_ACCEPTED.size}")
    return body[0]


# ---- model slots


def encode_slot(slot, reason=""):
    """LOAD_SLOT / UNLOAD_SLOT body (slot alone) and SLOT_FAILED body (slot, then the reason)."""
    return _SLOT.pack(slot) + reason.encode("utf-8")[:MAX_DETAIL]


def decode_slot(body):
    """(slot, reason text) of a slot body."""
    if len(body) < _SLOT.size:
        raise FrameError(f"slot body of {len(body)} bytes < {_SLOT.size}")
    return _SLOT.unpack_from(body)[0], bytes(body[_SLOT.size:]).decode("utf-8", "replace")
