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

    def __init__(self, chat, model, fingerprint=FINGERPRINT, include_usage=False):
        self.chat, self.model, self.fingerprint = chat, model, fingerprint
        self.include_usage = include_usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())

    def _head(self, kind):
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint}

    def chunk(self, text=None, finish_reason=None, role=None):
        """A stream chunk: chat carries `delta` (with the role on the first one), text carries `text`."""
        if self.chat:
            delta = {} if text is None else {"content": text}
            if role is not None:
                delta = {"role": role, **delta}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            out = dict(self._head("chat.completion.chunk"), choices=[choice])
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
            out = dict(self._head("text_completion"), choices=[choice])
        if self.include_usage:
            out["usage"] = None
        return out

    def delta_chunk(self, delta, finish_reason=None):
        """A chat stream chunk carrying one `delta` (content, reasoning_content or tool_calls)."""
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        out = dict(self._head("chat.completion.chunk"), choices=[choice])
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, counts):
        """The last chunk when stream_options.include_usage is set: no choices, only usage."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return dict(self._head(kind), choices=[], usage=counts)

    def body(self, text, finish_reason, counts, message=None):
        """The whole non-streaming response; chat takes the `message` (default: plain text content)."""
        if self.chat:
            choice = {"index": 0, "message": message or {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": finish_reason}
            return dict(self._head("chat.completion"), choices=[choice], usage=counts)
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return dict(self._head("text_completion"), choices=[choice], usage=counts)
