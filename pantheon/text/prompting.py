"""Turn a conversation or a raw prompt into token ids the way llama-server does."""

import json

from pantheon.errors import TemplateError
from pantheon.text import tool_formats
from pantheon.text.chat import ChatTemplate

_PROBE_ARGS = {"probe_arg": 7}
_PROBE = [{"role": "user", "content": "x"},
          {"role": "assistant", "content": None,
           "tool_calls": [{"id": "probe0001", "type": "function",
                           "function": {"name": "probe_fn", "arguments": _PROBE_ARGS}}]}]


class PromptBuilder:
    """Chat template plus tokenizer of one model; text stays on this side, ids go to the engine.

    template_source overrides the GGUF's `tokenizer.chat_template` (--chat-template / -file).
    """

    def __init__(self, tokenizer, metadata, template_source=None):
        self.tokenizer = tokenizer
        self.template = ChatTemplate.from_metadata(metadata, tokenizer_token_text=tokenizer.token_text)
        if template_source is not None:
            self.template = ChatTemplate(template_source, self.template.bos_token, self.template.eos_token)
        self.tool_format = tool_formats.detect(None if self.template.is_default else self.template.source)
        self._object_args = None

    def chat(self, messages, tools=None):
        """Rendered template, tokenized with special-token parsing; one BOS even if the template adds its own."""
        return self.encode_chat(self.render(messages, tools))

    def render(self, messages, tools=None, add_generation_prompt=True, **extra):
        """The prompt text; tool-call arguments in the history become objects when the template wants them.
        extra: more template variables (llama-server's chat_template_kwargs, e.g. enable_thinking)."""
        return self.template.render(self._history(messages), add_generation_prompt=add_generation_prompt,
                                    tools=tools, **extra)

    def encode_chat(self, text):
        return self._dedupe_bos(self.tokenizer.encode(text, add_special=True, parse_special=True))

    def cannot_fit(self, text, n_tokens):
        """True when `text` certainly needs more than `n_tokens` tokens: checked before paying to encode it."""
        return len(text) > n_tokens * self.tokenizer.max_token_chars

    def raw(self, text, add_special=True):
        """A plain completion prompt: BOS per metadata (unless `add_special` is False), special-token text read
        as those tokens (llama-server's, vLLM's and Ollama's raw prompts do: a prompt written in the model's chat
        format means its control tokens, as /tokenize and the chat template's text read them)."""
        return self.tokenizer.encode(text, add_special=add_special, parse_special=True)

    def _history(self, messages):
        """Null content becomes "" (templates test `'x' in content`); arguments objects where wanted."""
        messages = [dict(m, content="") if m.get("content", "") is None else m for m in messages]
        if not any(m.get("tool_calls") for m in messages) or not self.object_args:
            return messages
        return [dict(m, tool_calls=[_object_call(c) for c in m["tool_calls"]]) if m.get("tool_calls") else m
                for m in messages]

    @property
    def object_args(self):
        """Whether the template renders tool-call arguments given as objects (most do `| tojson`);
        found once by rendering a probe call, as llama.cpp does, since OpenAI sends JSON strings."""
        if self._object_args is None:
            try:
                out = self.template.render(_PROBE, add_generation_prompt=False)
                self._object_args = '"probe_arg"' in out
            except TemplateError:
                self._object_args = True
        return self._object_args

    def _dedupe_bos(self, ids):
        bos = self.tokenizer.bos_id
        if bos is not None and len(ids) > 1 and ids[0] == bos and ids[1] == bos:
            return ids[1:]
        return ids


def _object_call(call):
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return call
    return dict(call, function=dict(fn, arguments=args))
