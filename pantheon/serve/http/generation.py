"""One backend stream turned into text: incremental detokenizing, stop strings, usage, timings."""

import time

from pantheon.text.detokenize import Detokenizer
from pantheon.serve.http.backend import Finished, GenerationFailed, PromptLogprobs, Tokens
from pantheon.serve.http.indent import IndentLimit
from pantheon.serve.http.shapes import usage
from pantheon.serve.http.stops import StopMatcher


class Generation:
    """Iterate `pieces()` for the text; afterwards `finish_reason` and `usage` describe the end.

    finish_reason: "stop" (stop token or stop string), "length", or "abort" when the client went
    away (`gone()` turned true) or the consumer closed the iterator; the stream is then cancelled.
    `predict_limit` (seconds, llama-server's t_max_predict_ms): once that long has passed since the
    first token, the generation ends ("length") at the next token whose text holds a newline, so a
    code completion stops on a whole line. `min_indent` (llama-server's n_indent, 0 = off) ends it
    ("length") before the first later line indented less (see IndentLimit). `min_tokens` (vLLM's): the stop
    strings are not looked for in the text of the first that many tokens, only in what ends after it (the engine
    holds the end tokens off as long). `include_stop` (vLLM's include_stop_str_in_output): the text ends with the
    stop string that ended it. `special` (vLLM's skip_special_tokens false): control tokens' text is written.
    """

    def __init__(self, stream, tokenizer, stops=(), gone=None, recorder=None, model="",
                 started=None, watch=None, predict_limit=None, min_indent=0, min_tokens=0, include_stop=False,
                 special=False):
        self.stream, self.gone, self.recorder, self.model = stream, gone, recorder, model
        self.detok, self.stops = Detokenizer(tokenizer, special), StopMatcher(stops, include_stop)
        self.indent = IndentLimit(min_indent) if min_indent > 0 else None
        self.started = time.perf_counter() if started is None else started
        self.watch, self.predict_limit, self.min_tokens = watch, predict_limit, min_tokens
        self.finish_reason = None
        self.stop_token = -1  # the end token that stopped it (finish_reason "stop" without a stop string)
        self.usage = usage()
        self.tokens = 0
        self.token_ids = []  # every generated id, for llama-server's return_tokens
        # with logprobs: a TokenLogprob per token up to the one that completed a stop string, and the
        # character offset of each token's text in the decoded completion
        self.scores, self.offsets = [], []
        self._chars = 0
        self.first_at = self.ended_at = None  # perf_counter of the first token and of the end
        self.prompt_seen = None  # (prompt tokens, of them cached) as the first token reported them
        self.prompt_scores = []  # with prompt logprobs asked for: a TokenLogprob per prompt token from the second
        self._last = None
        self._newline = False  # the last Tokens event's text held a newline

    def pieces(self):
        """Non-empty text pieces, safe to send (no partial stop string, no partial character)."""
        try:
            if self.watch is None:
                yield from self._run()
            else:
                with self.watch.watching(self.gone, self.stream):
                    yield from self._run()
        finally:
            self.cancel()

    def cancel(self):
        """End the generation early (client gone, iterator closed); idempotent."""
        if self.finish_reason is None:
            self.finish_reason = "abort"
            self.stream.cancel()

    def _run(self):
        for event in self.stream:
            if self.gone is not None and self.gone():
                self.cancel()
                return
            if isinstance(event, Tokens):
                text, reason = self._step(event)
                if text:
                    yield text
                if reason is not None:
                    self._drain(reason)
                    return
            elif isinstance(event, PromptLogprobs):
                self.prompt_scores += event.scores
            elif isinstance(event, Finished):
                text = self._finish(event)
                if text:
                    yield text
                return

    def _step(self, event):
        """The text one Tokens event releases, and why the generation ends there (None: it goes on)."""
        text = self._text(event)
        if not self._ended and self._past_limit():
            text += self._gate(self.stops.push(self.detok.flush()) + self.stops.flush())  # all that is held
        if self._indent_cut:
            return text, "length"
        if self.stops.matched is not None:
            return text, "stop"
        return text, "length" if self._past_limit() else None

    def _text(self, event):
        now = time.perf_counter()
        if self.recorder is not None:
            if self._last is None:
                self.recorder.ttft(self.model, now - self.started)
            else:
                self.recorder.itl(self.model, (now - self._last) / len(event.ids), len(event.ids))
        self._last = now
        self.first_at = self.first_at or now
        if self.prompt_seen is None and event.prompt_tokens:
            self.prompt_seen = (event.prompt_tokens, event.cached_tokens)
        self._newline = False
        if not event.logprobs:
            return "".join(self._plain(tid) for tid in event.ids)
        return "".join(self._scored(tid, score) for tid, score in zip(event.ids, event.logprobs))

    def _plain(self, tid):
        """One token's safe text; none once a stop string or n_indent ended the answer."""
        return "" if self._ended else self._gate(self._stopped(self._decode(tid)))

    def _scored(self, tid, score):
        """One token's safe text, recording its logprob and offset; none once the answer ended."""
        if self._ended:
            return ""
        self.scores.append(score)
        self.offsets.append(self._chars)
        text = self._decode(tid)
        self._chars += len(text)
        return self._gate(self._stopped(text))

    def _stopped(self, text):
        """`text` through the stop strings, which vLLM's min_tokens holds off for the first tokens (one that
        spans the boundary still ends the answer, as in vLLM)."""
        return self.stops.hold(text) if self.tokens <= self.min_tokens else self.stops.push(text)

    def _decode(self, tid):
        """Count one token and return its text. Tokens that arrive in the same event after the one that
        ended the answer are never counted: a server generating one token at a time would not have made them."""
        self.tokens += 1
        self.token_ids.append(tid)
        text = self.detok.push(tid)
        self._newline = self._newline or "\n" in text
        return text

    @property
    def _ended(self):
        return self.stops.matched is not None or self._indent_cut

    def _gate(self, text):
        """Text the stop strings released, cut where n_indent ends the answer."""
        return text if self.indent is None else self.indent.push(text)

    @property
    def _indent_cut(self):
        return self.indent is not None and self.indent.cut

    def _past_limit(self):
        return (self.predict_limit is not None and self._newline
                and self._last - self.first_at > self.predict_limit)

    def _drain(self, reason):
        """Cancel the rest, but wait for the backend's Finished: it knows the prompt and cache counts."""
        self.finish_reason = reason
        self.stream.cancel()
        for event in self.stream:
            if isinstance(event, Finished):
                self._account(event, self.tokens)
                return

    def _finish(self, event):
        if event.reason == "abort":
            raise GenerationFailed("the generation was aborted by the server")
        end = self.detok.push(event.stop_token) if self.stops.include and event.stop_token >= 0 else ""
        text = self._gate(self.stops.push(end + self.detok.flush()) + self.stops.flush())
        self.finish_reason = "stop" if self.stops.matched is not None else event.reason
        if self.stops.matched is None:
            self.stop_token = event.stop_token
        if self._indent_cut:
            self.finish_reason = "length"
        self._account(event, event.completion_tokens)
        return text

    def _account(self, event, completion_tokens):
        self.ended_at = time.perf_counter()
        self.usage = usage(event.prompt_tokens, completion_tokens, event.cached_tokens)
        if self.recorder is not None:
            self.recorder.tokens(self.model, event.prompt_tokens, completion_tokens, event.cached_tokens)
