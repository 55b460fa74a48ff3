"""The text side of a loaded model: its tokenizer and chat metadata, built from its file on first use."""

from pantheon.source import text_side


class ModelText:
    """For a model holding its opened file as `gguf` (a GGUF, or an HF directory behind the same face);
    the CPU Model and the GPU model alike. A die worker builds the tokenizer only for a request that
    needs token texts (a grammar, the infill sampler), so plain generation never pays for it."""

    _text = None

    @property
    def tokenizer(self):
        """The model's tokenizer, built from its metadata (or tokenizer.json) on first use."""
        return self._text_side()[0]

    @property
    def chat_metadata(self):
        """GGUF-style metadata the chat template reads (tokenizer.chat_template, BOS/EOS ids)."""
        return self._text_side()[1]

    def _text_side(self):
        if self._text is None:
            self._text = text_side(self.gguf)
        return self._text
