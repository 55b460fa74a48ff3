"""OpenAI response and chunk shapes for chat.completion(.chunk) and text_completion."""

import hashlib
import secrets
import time

from pantheon import __version__

FINGERPRINT = "fp_" + hashlib.sha256(f"pantheon {__version__}".encode()).hexdigest()[:10]


def usage(prompt_tokens=0, completion_tokens=0, cached_tokens=0):
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class Envelope:
    """Id, timestamp, model and fingerprint shared by every body or chunk of one response."""

    def __init__(self, chat, model, fingerprint=FINGERPRINT, include_usage=False, timings_per_token=False,
                 request_id=None, continuous_usage=False):
        self.chat, self.model, self.fingerprint = chat, model, fingerprint
        self.include_usage, self.timings_per_token = include_usage, timings_per_token
        self.continuous_usage = continuous_usage  # vLLM's continuous_usage_stats: each chunk's usage so far
        self.id = ("chatcmpl-" if chat else "cmpl-") + (request_id or secrets.token_hex(12))  # vLLM's request_id
        self.created = int(time.time())

    def _head(self, kind):
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint}

    def chunk(self, text=None, finish_reason=None, role=None, index=0, logprobs=None):
        """A stream chunk: chat carries `delta` (with the role on the first one), text carries `text`."""
        if self.chat:
            delta = {} if text is None else {"content": text}
            if role is not None:
                delta = {"role": role, **delta}
            return self.delta_chunk(delta, finish_reason, index, logprobs)
        choice = {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish_reason}
        return self._chunk("text_completion", choice)

    def delta_chunk(self, delta, finish_reason=None, index=0, logprobs=None):
        """A chat stream chunk carrying one `delta` (content, reasoning_content or tool_calls)."""
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return self._chunk("chat.completion.chunk", choice)

    def _chunk(self, kind, choice):
        out = dict(self._head(kind), choices=[choice])
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, counts):
        """The last chunk when stream_options.include_usage is set: no choices, only usage."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return dict(self._head(kind), choices=[], usage=counts)

    def choice(self, text, finish_reason, message=None, index=0, logprobs=None):
        """One choice of a whole response; chat takes the `message` (default: plain text content)."""
        if self.chat:
            return {"index": index, "message": message or {"role": "assistant", "content": text},
                    "logprobs": logprobs, "finish_reason": finish_reason}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}

    def body(self, choices, counts):
        """The whole non-streaming response: its choices (see `choice`) and the usage of all of them."""
        return dict(self._head("chat.completion" if self.chat else "text_completion"), choices=choices,
                    usage=counts)


def total_usage(counts):
    """One usage object summing several choices' (a list of prompts: every prompt counts)."""
    counts = list(counts)
    return usage(sum(c["prompt_tokens"] for c in counts), sum(c["completion_tokens"] for c in counts),
                 sum(c["prompt_tokens_details"]["cached_tokens"] for c in counts))
