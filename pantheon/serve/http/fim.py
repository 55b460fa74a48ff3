"""Fill-in-the-middle prompts: [BOS] (extra files) PRE prefix SUF suffix MID, for code models with FIM tokens."""

from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad

FIM_MARKS = ("fim_pre", "fim_suf", "fim_mid")


def fim_prompt(tok, bos, prefix, suffix, extra=(), prompt="", param="input_prefix"):
    """[BOS] (extra files) PRE prefix SUF suffix MID prompt, in llama.cpp's prefix-suffix-middle order.
    A model without FIM tokens is a 400 naming `param` (the field that asked for a fill)."""
    marks = tok.fim_ids
    if not has_fim(tok):
        raise RequestError("this model's vocabulary has no fill-in-the-middle tokens; a fill needs a code model "
                           "with FIM tokens", code="not_supported", param=param)
    if isinstance(prompt, list):
        raise bad("prompt", "/infill takes prompt as text", "invalid_type")
    sep = marks["fim_sep"]
    head = list(bos)
    for chunk in extra:
        text = f"{chunk.get('filename', '')}\n{chunk.get('text', '')}"
        head += ([sep] if sep is not None else []) + _plain(tok, text)
    return (head + [marks["fim_pre"]] + _plain(tok, prefix) + [marks["fim_suf"]] + _plain(tok, suffix)
            + [marks["fim_mid"]] + _plain(tok, prompt))


def has_fim(tok):
    """Whether the vocabulary has the three marks of a fill-in-the-middle prompt."""
    return all(tok.fim_ids[role] is not None for role in FIM_MARKS)


def _plain(tok, text):
    return tok.encode(text, add_special=False, parse_special=False) if text else []
