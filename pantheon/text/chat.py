"""A model's chat template: turns a conversation into the prompt text the model was trained on."""

import copy
import datetime
import json
import re

import jinja2

from pantheon.text.chat_env import compile_template
from pantheon.errors import TemplateError

# Used when the GGUF carries no `tokenizer.chat_template`: ChatML, as llama.cpp falls back to.
# Each turn is `<|im_start|>{role}\n{content}<|im_end|>\n`; content may be a string or a list of
# OpenAI text parts; the generation prompt is `<|im_start|>assistant\n`.
DEFAULT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- elif message['content'] is not none -%}"
    "{%- for part in message['content'] if part['type'] == 'text' -%}{{- part['text'] -}}{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

KEY_TEMPLATE = "tokenizer.chat_template"
KEY_TOKENS = "tokenizer.ggml.tokens"
KEY_BOS = "tokenizer.ggml.bos_token_id"
KEY_EOS = "tokenizer.ggml.eos_token_id"

# How templates that only know user/assistant say so ("System role not supported", "Conversation
# roles must alternate user/assistant/...").
_SYSTEM_REJECTION = re.compile(r"system|roles?\b", re.IGNORECASE)


class ChatTemplate:
    """A compiled Jinja chat template plus the special-token text it refers to."""

    def __init__(self, source=None, bos_token="", eos_token=""):
        self.is_default = not source
        self.source = DEFAULT_TEMPLATE if self.is_default else source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._compiled = compile_template(self.source)

    @classmethod
    def from_metadata(cls, meta, tokenizer_token_text=None):
        """Build from GGUF metadata; `tokenizer_token_text(id) -> str` overrides the tokens list."""
        token_text = tokenizer_token_text or _token_lookup(meta.get(KEY_TOKENS))
        return cls(meta.get(KEY_TEMPLATE),
                   bos_token=_special(meta, KEY_BOS, token_text),
                   eos_token=_special(meta, KEY_EOS, token_text))

    def render(self, messages, add_generation_prompt=True, tools=None, **extra):
        """Prompt text for `messages`; a template that rejects the system role gets it merged."""
        try:
            return self._render(messages, add_generation_prompt, tools, extra)
        except TemplateError as first:
            merged = merge_system(messages)
            if merged is None or not _SYSTEM_REJECTION.search(str(first)):
                raise
            try:
                return self._render(merged, add_generation_prompt, tools, extra)
            except TemplateError as second:
                raise second from first

    def _render(self, messages, add_generation_prompt, tools, extra):
        context = dict(self._conventions(tools), **extra)
        context.update(bos_token=self.bos_token, eos_token=self.eos_token,
                       add_generation_prompt=add_generation_prompt)
        # Copies: the sandbox lets templates mutate lists, never the caller's.
        context["messages"] = copy.deepcopy(list(messages))
        if tools is not None:
            context["tools"] = copy.deepcopy(list(tools))
        try:
            return self._compiled.template.render(context)
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template failed: {exc}") from exc
        except (TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
            raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc

    def _conventions(self, tools):
        """Variables some templates read that HF never passes; llama.cpp supplies them (firefunction-v2)."""
        wanted, context = self._compiled.variables, {}
        if "functions" in wanted:
            context["functions"] = json.dumps(tools, indent=2, ensure_ascii=False) if tools else ""
        if "datetime" in wanted:
            context["datetime"] = datetime.datetime.now().strftime("%b %d %Y %H:%M:%S GMT")
        return context


def merge_system(messages):
    """The conversation with a leading system message folded into the first user turn, or None."""
    if not messages or messages[0].get("role") != "system":
        return None
    system, rest = _text(messages[0].get("content")), list(messages[1:])
    if not rest or rest[0].get("role") != "user":
        return [{"role": "user", "content": system}] + rest
    user = rest[0].get("content")
    if isinstance(user, list):
        merged = [{"type": "text", "text": f"{system}\n\n"}] + user
    else:
        merged = f"{system}\n\n{user}" if user else system
    return [dict(rest[0], content=merged)] + rest[1:]


def _text(content):
    """Plain text of a message's content: a string, OpenAI text parts, or nothing."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def _token_lookup(tokens):
    if tokens is None:
        return lambda token_id: ""
    return lambda token_id: tokens[token_id] if 0 <= token_id < len(tokens) else ""


def _special(meta, key, token_text):
    token_id = meta.get(key)
    return "" if token_id is None else token_text(int(token_id))
