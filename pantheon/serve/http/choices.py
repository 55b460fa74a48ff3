"""The choices of one response: each its own generation, formatted whole or merged into one event stream."""

import dataclasses
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from pantheon.serve.http import logprobs as shapes_lp, timings
from pantheon.serve.http.backend import Finished, PromptLogprobs
from pantheon.serve.http.shapes import usage

_END = object()


@dataclass
class Choice:
    """One generation of a response: its index, text source, chat output parser and echoed prompt."""

    index: int
    gen: object  # pantheon.serve.http.generation.Generation
    output: object = None  # chat: the parser splitting content, reasoning and tool calls; None for text
    echo: str = ""
    spell: object = None  # a logprobs.TokenText when logprobs were asked for, else None
    prompt_ids: tuple = ()  # the prompt, when its tokens are scored (echo with logprobs, vLLM's prompt_logprobs)
    echo_k: Optional[int] = None  # with echo and logprobs: the alternatives the echoed prompt's tokens show
    prompt_k: Optional[int] = None  # vLLM's prompt_logprobs: the alternatives its entries show
    return_ids: bool = False  # vLLM's return_token_ids: the prompt's ids and the generated ones are shown
    _sent: int = field(default=0, repr=False)  # scores already sent in stream chunks
    _echoed: bool = field(default=False, repr=False)  # the scored echo went out in a stream chunk
    _ids_sent: int = field(default=0, repr=False)  # generated ids already sent in stream chunks
    _prompt_sent: bool = field(default=False, repr=False)  # the prompt's ids went out in a stream chunk

    @property
    def reason(self):
        """OpenAI says "tool_calls" when a reply that ended by itself called tools."""
        if self.output is not None and self.output.has_calls and self.gen.finish_reason == "stop":
            return "tool_calls"
        return self.gen.finish_reason

    @property
    def stop_reason(self):
        """vLLM's: the stop string that ended the choice, or the end token it stopped on unless that is the
        model's EOS (null for EOS, a length cut or an abort)."""
        gen = self.gen
        if gen.finish_reason != "stop":
            return None
        if gen.stops.matched is not None:
            return gen.stops.matched
        eos = getattr(gen.detok.tokenizer, "eos_id", None)
        return gen.stop_token if gen.stop_token >= 0 and gen.stop_token != eos else None

    def token_ids(self):
        """vLLM's token_ids: the ids generated, the end token that stopped the answer included."""
        return list(self.gen.token_ids) + ([self.gen.stop_token] if self.gen.stop_token >= 0 else [])

    def new_token_ids(self):
        """The generated ids not yet sent in a stream chunk (the end token last, once the answer has ended);
        a slice of the new ones only, not a copy of all of them per chunk."""
        ids = self.token_ids() if self.gen.stop_token >= 0 else self.gen.token_ids
        new = list(ids[self._ids_sent:])
        self._ids_sent += len(new)
        return new

    def message(self):
        """A chat choice's reply (content, reasoning_content, tool_calls); its generation runs to the end here."""
        self.output.push("".join(self.gen.pieces()))
        self.output.finish()
        return self.output.message()

    def deltas(self):
        """A chat choice's reply deltas as its text comes, then the parser's last ones (none after an abort)."""
        for text in self.gen.pieces():
            yield from self.output.push(text)
        if self.gen.finish_reason != "abort":
            yield from self.output.finish()

    def logprobs(self, chat, scores=None, offsets=None):
        """This choice's logprobs object for `scores` (default: all of them), or None when not asked."""
        if self.spell is None:
            return None
        whole = scores is None
        scores = self.gen.scores if whole else scores
        if chat:
            return shapes_lp.chat_logprobs(self.spell, scores)
        shift = len(self.echo)  # a completion's offsets count from the start of the text, echo included
        offsets = [o + shift for o in (self.gen.offsets if offsets is None else offsets)]
        out = shapes_lp.completion_logprobs(self.spell, scores, offsets)
        return shapes_lp.joined(self.echo_logprobs(), out) if whole and self.echo_k is not None else out

    def echo_logprobs(self):
        """The echoed prompt's logprobs (text_completion's shape), as the die scored it."""
        offsets = shapes_lp.text_offsets(self.spell.tokenizer, self.prompt_ids, len(self.echo))
        scores = [dataclasses.replace(s, top=s.top[:self.echo_k]) for s in self.gen.prompt_scores]
        return shapes_lp.echoed_logprobs(self.spell, self.prompt_ids, scores, offsets)

    def vllm_prompt_logprobs(self):
        """vLLM's prompt_logprobs of this choice's prompt (None when not asked); its generation has ended."""
        if self.prompt_k is None:
            return None
        return shapes_lp.prompt_entries(self.gen.detok.tokenizer, self.gen.prompt_scores, self.prompt_k)

    def new_logprobs(self, chat):
        """The logprobs of tokens not yet sent in a chunk (None when there are none or none were asked)."""
        start, end = self._sent, len(self.gen.scores)
        if self.spell is None or start == end:
            return None
        self._sent = end
        return self.logprobs(chat, self.gen.scores[start:end], self.gen.offsets[start:end])


def whole(env, choice):
    """The non-streaming choice object (its generation runs to the end here); an echo leads the text."""
    text = "".join(choice.gen.pieces())
    message = None if choice.output is None else _message(choice, text)
    out = env.choice(choice.echo + text, choice.reason, message, choice.index, choice.logprobs(env.chat))
    return _vllm_fields(env, choice, out)


def _message(choice, text):
    """A chat choice's message of its text; an echo leads its content (past the parser, as vLLM prepends it)."""
    choice.output.push(text)
    choice.output.finish()
    message = choice.output.message()
    return dict(message, content=choice.echo + (message.get("content") or "")) if choice.echo else message


def _vllm_fields(env, choice, out):
    """vLLM's stop_reason, and its token ids and prompt_logprobs when asked (a chat response carries the
    prompt's once, beside its choices)."""
    out["stop_reason"] = choice.stop_reason
    if choice.return_ids:
        out["token_ids"] = choice.token_ids()
        if not env.chat:
            out["prompt_token_ids"] = list(choice.prompt_ids)
    if choice.prompt_k is not None and not env.chat:
        out["prompt_logprobs"] = choice.vllm_prompt_logprobs()
    return out


def chunks(env, choice):
    """Stream chunks of one choice, its finish chunk last (none when it was aborted)."""
    chat, i = env.chat, choice.index
    if chat:
        yield _with_ids(env, choice, env.chunk("", role="assistant", index=i))
    if choice.echo and choice.echo_k is None:
        yield _with_ids(env, choice, env.chunk(choice.echo, index=i))
    for text in choice.gen.pieces():
        yield from _scored_echo(env, choice)
        if choice.output is None:
            yield _dressed(env, choice, env.chunk(text, index=i, logprobs=choice.new_logprobs(chat)))
            continue
        for delta in choice.output.push(text):
            yield _dressed(env, choice, env.delta_chunk(delta, index=i, logprobs=choice.new_logprobs(chat)))
    if choice.output is not None:
        for delta in choice.output.finish():
            yield _dressed(env, choice, env.delta_chunk(delta, index=i, logprobs=choice.new_logprobs(chat)))
    yield from _scored_echo(env, choice)
    if choice.gen.finish_reason != "abort":
        last = env.chunk(None if chat else "", choice.reason, index=i, logprobs=choice.new_logprobs(chat))
        last["choices"][0]["stop_reason"] = choice.stop_reason
        if env.continuous_usage:
            last["usage"] = choice.gen.usage
        _with_ids(env, choice, last)
        if not env.include_usage:  # as llama-server: the timings ride the usage chunk when there is one
            last["timings"] = timings.final([choice.gen])
        yield last


def _scored_echo(env, choice):
    """An echo whose logprobs were asked for goes out once, with them: before the first piece of text or
    the end (the die scores the prompt before its first token, so by then every score has come)."""
    if choice.echo_k is not None and not choice._echoed:
        choice._echoed = True
        yield _with_ids(env, choice, env.chunk(choice.echo, index=choice.index, logprobs=choice.echo_logprobs()))


def _dressed(env, choice, chunk):
    """A text chunk with its choice's timings so far (llama-server's timings_per_token), its usage so far (vLLM's
    continuous_usage_stats) and its ids (below)."""
    if env.timings_per_token:
        chunk["timings"] = timings.partial(choice.gen)
    if env.continuous_usage:
        prompt, cached = choice.gen.prompt_seen or (0, 0)
        chunk["usage"] = usage(prompt, choice.gen.tokens, cached)
    return _with_ids(env, choice, chunk)


def _with_ids(env, choice, chunk):
    """With vLLM's return_token_ids, a chunk carries the ids generated since the last one, and a choice's first
    chunk its prompt's (a chat's beside the choices, as vLLM's first chunk)."""
    if not choice.return_ids:
        return chunk
    entry = chunk["choices"][0]
    if not choice._prompt_sent:
        choice._prompt_sent = True
        (chunk if env.chat else entry)["prompt_token_ids"] = list(choice.prompt_ids)
    entry["token_ids"] = choice.new_token_ids()
    return chunk


def merged(sources):
    """Items of several iterators as they come; one thread per iterator when there are several.

    An exception in any of them is raised here, after the items it produced before it."""
    if len(sources) == 1:
        yield from sources[0]
        return
    inbox = queue.Queue()
    for source in sources:
        threading.Thread(target=_pump, args=(source, inbox), daemon=True).start()
    live = len(sources)
    while live:
        item, error = inbox.get()
        if error is not None:
            raise error
        if item is _END:
            live -= 1
        else:
            yield item


def _pump(source, inbox):
    try:
        for item in source:
            inbox.put((item, None))
    except Exception as exc:  # handed to the consuming thread, which reports it in-band
        inbox.put((None, exc))
        return
    inbox.put((_END, None))


def split(stream, n):
    """One backend stream of `n` choices as `n` streams, one per choice (a single choice: the stream).

    Whoever iterates first reads the backend stream and files each event under its choice; the others
    wait for theirs. The shared prompt counts once in usage: choices after the first report no prompt
    or cached tokens, as OpenAI's usage for n > 1 does."""
    if n == 1:
        return [stream]
    shared = _Split(stream, n)
    return [ChoiceStream(shared, i) for i in range(n)]


class _Split:
    def __init__(self, stream, n):
        self.stream, self.source = stream, iter(stream)
        self.inbox = [deque() for _ in range(n)]
        self.cond = threading.Condition()
        self.reading = False
        self.ended = False
        self.error = None
        self.cancelled = set()

    def take(self, choice):
        """The next event of `choice`; None once the backend stream has ended."""
        while True:
            with self.cond:
                while not self.inbox[choice]:
                    if self.error is not None:
                        raise self.error
                    if self.ended:
                        return None
                    if not self.reading:
                        self.reading = True
                        break
                    self.cond.wait()
                else:
                    return self.inbox[choice].popleft()
            self._read()  # this reader's turn: one event, for whichever choice it is

    def _read(self):
        """One event off the backend stream, filed under its choice (outside the lock: it may block)."""
        event, error, ended = None, None, False
        try:
            event = next(self.source)
        except StopIteration:
            ended = True
        except Exception as exc:  # every choice's reader raises it
            error = exc
        with self.cond:
            self.reading = False
            self.ended, self.error = self.ended or ended, self.error or error
            if isinstance(event, PromptLogprobs):  # the prompt every choice shares: each echo shows them
                for inbox in self.inbox:
                    inbox.append(event)
            elif event is not None:
                self.inbox[event.choice].append(_counted_once(event))
            self.cond.notify_all()

    def cancel(self, choice):
        """Stop one choice; once every choice is stopped the whole request is cancelled."""
        with self.cond:
            self.cancelled.add(choice)
            whole = len(self.cancelled) == len(self.inbox)
        self.stream.cancel(None if whole else choice)


def _counted_once(event):
    if isinstance(event, Finished) and event.choice > 0:
        return dataclasses.replace(event, prompt_tokens=0, cached_tokens=0)
    return event


class ChoiceStream:
    """The events of one choice of a split stream (the Stream protocol, resumable)."""

    def __init__(self, shared, choice):
        self.shared, self.choice = shared, choice
        self.finished = False

    @property
    def replica(self):
        return getattr(self.shared.stream, "replica", None)

    def __iter__(self):
        while not self.finished:
            event = self.shared.take(self.choice)
            if event is None:
                return
            self.finished = isinstance(event, Finished)
            yield event

    def cancel(self, choice=None):
        if not self.finished:
            self.shared.cancel(self.choice)
