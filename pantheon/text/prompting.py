"""Turn a conversation or a raw prompt into token ids the way llama-server does."""

from pantheon.text.chat import ChatTemplate


class PromptBuilder:
    """Chat template plus tokenizer of one model; text stays on this side, ids go to the engine."""

    def __init__(self, tokenizer, metadata):
        self.tokenizer = tokenizer
        self.template = ChatTemplate.from_metadata(metadata, tokenizer_token_text=tokenizer.token_text)

    def chat(self, messages, tools=None):
        """Rendered template, tokenized with special-token parsing; one BOS even if the template adds its own."""
        text = self.template.render(messages, add_generation_prompt=True, tools=tools)
        return self._dedupe_bos(self.tokenizer.encode(text, add_special=True, parse_special=True))

    def raw(self, text):
        """A plain completion prompt: BOS per metadata, special-token text taken literally."""
        return self.tokenizer.encode(text, add_special=True, parse_special=False)

    def _dedupe_bos(self, ids):
        bos = self.tokenizer.bos_id
        if bos is not None and len(ids) > 1 and ids[0] == bos and ids[1] == bos:
            return ids[1:]
        return ids
