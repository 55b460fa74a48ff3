"""The text side of a HuggingFace model: tokenizer, special tokens and chat template from its JSON files."""

import os

from pantheon.hf.config import HFConfigError, read_json
from pantheon.text import specials as sp
from pantheon.text.hf_tokenizer import HFTokenizer

MAX_TEMPLATE_BYTES = 1 << 20


def _optional_json(text_dir, name):
    path = os.path.join(text_dir, name)
    return read_json(path, name, limit=16 << 20) if os.path.isfile(path) else {}


def _token_content(value):
    """tokenizer_config.json spells a special token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value):
    """An id or a list of ids from generation_config.json / config.json; anything else is ignored."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


def _special_id(tok, tok_cfg, key, *fallbacks):
    content = _token_content(tok_cfg.get(key))
    if content is not None and content in tok.token_to_id:
        return tok.token_to_id[content]
    for source in fallbacks:
        ids = [i for i in _ids(source.get(f"{key}_id")) if i < tok.n_vocab]
        if ids:
            return ids[0]
    return None


def chat_template(text_dir, tok_cfg):
    """The template source: chat_template.jinja, else tokenizer_config.json's chat_template
    (a string, or a list of {name, template} of which 'default' is used), else None."""
    jinja = os.path.join(text_dir, "chat_template.jinja")
    if os.path.isfile(jinja):
        if os.path.getsize(jinja) > MAX_TEMPLATE_BYTES:
            raise HFConfigError(f"{jinja}: over {MAX_TEMPLATE_BYTES} bytes")
        with open(jinja, encoding="utf-8", errors="replace") as f:
            return f.read()
    source = tok_cfg.get("chat_template") or _optional_json(text_dir, "chat_template.json").get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if source is not None and not isinstance(source, str):
        raise HFConfigError(f"{text_dir}: chat_template is a {type(source).__name__}, not a string")
    return source


def open_hf_text(text_dir, hf_config):
    """(HFTokenizer, GGUF-style metadata for the chat template) of the model whose files are in `text_dir`."""
    tok_cfg = _optional_json(text_dir, "tokenizer_config.json")
    gen_cfg = _optional_json(text_dir, "generation_config.json")
    tok = HFTokenizer(os.path.join(text_dir, "tokenizer.json"))
    if isinstance(hf_config.get("vocab_size"), int):
        tok.pad_to(hf_config["vocab_size"])
    bos = _special_id(tok, tok_cfg, "bos_token", gen_cfg, hf_config)
    eos = _special_id(tok, tok_cfg, "eos_token", gen_cfg, hf_config)
    # Every id generation_config.json lists ends generation (Llama 3 lists <|eot_id|> there), and the
    # end-of-generation texts llama.cpp recognises do too, so a model stops as its GGUF would.
    stops = [i for i in _ids(gen_cfg.get("eos_token_id")) + _ids(hf_config.get("eos_token_id")) if i < tok.n_vocab]
    stops += [tok.token_to_id[t] for t in sp.EOG_TEXTS if t in tok.token_to_id and tok.is_special(tok.token_to_id[t])]
    tok.set_specials(bos, eos, stops)
    meta = {"tokenizer.chat_template": chat_template(text_dir, tok_cfg),
            "tokenizer.ggml.bos_token_id": bos, "tokenizer.ggml.eos_token_id": eos}
    return tok, {k: v for k, v in meta.items() if v is not None}
