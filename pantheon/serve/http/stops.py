"""Stop strings on streamed text: cut at the first match, never emit a prefix that could still match."""


class StopMatcher:
    """Feed text pieces as they are detokenized; each push returns only text that is safe to send.

    Text that could be the beginning of a stop string is held back until the next piece settles it,
    so a client never sees part of a stop string, even when the string spans several tokens.
    """

    def __init__(self, stops=(), include=False):
        self.stops = tuple(s for s in stops if s)
        self.include = include  # vLLM's include_stop_str_in_output: the text ends with the stop string it matched
        self.matched = None  # the stop string that ended the text, once one has
        self._held = ""
        self._floor = 0  # a match must end past this many held characters (they came through hold())

    def push(self, text):
        """Safe text completed by `text`; after a match, the text before it (and the stop string, with
        `include`), and nothing ever again."""
        if self.matched is not None:
            return ""
        buf = self._held + text
        cut, stop = self._first_match(buf)
        if stop is not None:
            self.matched, self._held = stop, ""
            return buf[:cut + len(stop) if self.include else cut]
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        self._floor = max(0, self._floor - (len(buf) - keep))  # held text goes out from its front
        return buf[:len(buf) - keep]

    def hold(self, text):
        """`push` without looking for a stop string in `text` (vLLM's min_tokens): it only holds the tail that
        could begin one, so a stop string the next push completes is still found (vLLM's window finds it too)."""
        buf = self._held + text
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        self._floor = len(self._held)
        return buf[:len(buf) - keep]

    def flush(self):
        """What is still held back, once generation ends without a match."""
        text, self._held = ("" if self.matched is not None else self._held), ""
        return text

    def _first_match(self, buf):
        hits = [(buf.find(s, max(0, self._floor - len(s) + 1)), s) for s in self.stops]
        hits = [(i, s) for i, s in hits if i >= 0]
        return min(hits, key=lambda h: h[0]) if hits else (-1, None)

    def _partial_suffix(self, buf):
        """Length of the longest tail of `buf` that is a proper prefix of some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:n]):
                    best = n
                    break
        return best
