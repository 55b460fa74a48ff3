"""DRY's sequence breakers as token sequences: each token whose text holds a breaker, or ends with its start (then
with the tokens of the rest), as llama.cpp finds them; once per tokenizer and breaker list."""

import threading
import weakref

DEFAULT = ("\n", ":", "\"", "*")  # llama-server's dry_sequence_breakers
MAX_BYTES = 40  # llama.cpp cuts a breaker to 40 bytes
MAX_TAIL = 20  # ... and the tokens that finish one to 20
MAX_LISTS = 8  # breaker lists remembered per tokenizer (a client may send a new one each request)

_cache = weakref.WeakKeyDictionary()  # tokenizer -> {breaker list: breakers}
_lock = threading.Lock()


def breakers(tokenizer, strings=None):
    """((head id, tail ids), ...) for the breaker `strings` (None: llama-server's default list)."""
    key = DEFAULT if strings is None else tuple(strings)
    with _lock:
        known = _cache.setdefault(tokenizer, {})
        if key in known:
            return known[key]
    found = _sequences(tokenizer, key)
    with _lock:
        if len(known) >= MAX_LISTS:
            known.clear()
        known[key] = found
    return found


def _sequences(tokenizer, strings):
    words = [tokenizer.token_bytes(tid, special=True) for tid in range(tokenizer.n_vocab)]
    found = set()
    for text in strings:
        breaker = text.encode("utf-8")[:MAX_BYTES]
        if breaker:
            found.update(_overlaps(tokenizer, words, breaker))
    return tuple(sorted(found))


def _overlaps(tokenizer, words, breaker):
    """(token, tail) for every token holding `breaker` (no tail), or whose end is the breaker's start (the tail:
    the rest of the breaker tokenized, at most MAX_TAIL tokens)."""
    first = breaker[:1]
    for tid, word in enumerate(words):
        if breaker in word:
            yield tid, ()
            continue
        at = word.find(first)
        while at != -1:
            end = word[at:]
            if breaker.startswith(end):
                tail = _tokens(tokenizer, breaker[len(end):])
                if tail is not None:
                    yield tid, tail
            at = word.find(first, at + 1)


def _tokens(tokenizer, rest):
    """The breaker's remaining bytes as tokens; None where they start inside a UTF-8 character (our tokenizers
    take text: such a tail is left out, so that breaker is only seen from its first byte on)."""
    try:
        text = rest.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return tuple(tokenizer.encode(text, add_special=False, parse_special=False))[:MAX_TAIL]
