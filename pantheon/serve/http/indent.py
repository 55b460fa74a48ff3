"""llama-server's n_indent: a code completion ends before the first later line indented less than asked."""


class IndentLimit:
    """Push text pieces; each returns what may be sent. On every line after the first, the first
    character that is not a space or tab ends the line's indentation; if that indentation is below
    `minimum`, the text is cut before that character (a blank line too: its newline is such a
    character), `cut` turns true and nothing passes after. The cut line's indentation is kept, as
    llama-server keeps it. Spaces and tabs count one each."""

    def __init__(self, minimum):
        self.minimum, self.cut = minimum, False
        self._indent = None  # the current line's indentation so far; None on the first line and past it

    def push(self, text):
        if self.cut:
            return ""
        for i, ch in enumerate(text):
            if self._indent is not None and ch not in " \t":
                if self._indent < self.minimum:
                    self.cut = True
                    return text[:i]
                self._indent = None
            if ch == "\n":
                self._indent = 0
            elif self._indent is not None:
                self._indent += 1
        return text
