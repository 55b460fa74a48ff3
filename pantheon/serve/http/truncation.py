"""vLLM's truncate_prompt_tokens: a generation's prompt keeps its last tokens, an embedding input its first."""

from pantheon.serve.http.field_types import bad, integer


def field(name, v):
    """-1 (as many tokens as the context holds) or a number of tokens, at least 1."""
    v = integer(name, v, -1)
    if v == 0:
        raise bad(name, "must be -1 (as many tokens as the context holds) or at least 1, got 0", "invalid_value")
    return v


def limit(served, asked, room=1):
    """The tokens a prompt keeps when `asked` (-1: the context less `room` tokens to generate); None if not."""
    if asked is None:
        return None
    return max(1, served.n_ctx - max(1, room)) if asked == -1 else asked


def _chars(served, keep):
    """Characters that hold at least min(2 * keep, n_ctx - 1) tokens: enough that the tokens near a cut (the
    only ones a cut can change) fall outside the `keep` kept, and few enough to pass the text bound."""
    return min(2 * keep, served.n_ctx - 1) * served.tokenizer.max_token_chars


def last_text(served, text, keep):
    """The end of `text` that its last `keep` tokens come from (a long document is not tokenized whole)."""
    chars = _chars(served, keep)
    return text[-chars:] if len(text) > chars else text


def first_text(served, text, keep):
    """The start of `text` that its first `keep` tokens come from."""
    return text[:_chars(served, keep)]


def last(ids, keep):
    """The last `keep` ids (vLLM slices the prompt so: a BOS goes with the rest of what is cut)."""
    return ids if keep is None or len(ids) <= keep else ids[-keep:]


def first_ids(tokenizer, text, keep):
    """An embedding input's first `keep` tokens with its special tokens kept (BOS or CLS before, EOS or SEP
    after), as Hugging Face's truncation keeps them: a model pooled on its last token still reads its EOS."""
    whole = tokenizer.encode(text, add_special=True, parse_special=True)
    if len(whole) <= keep:
        return whole
    plain = tokenizer.encode(text, add_special=False, parse_special=True)
    head = next((h for h in range(len(whole) - len(plain) + 1) if whole[h:h + len(plain)] == plain), None)
    tail = [] if head is None else whole[head + len(plain):]
    if head is None or keep - head - len(tail) < 1:
        return whole[:keep]
    return whole[:head] + plain[:keep - head - len(tail)] + tail
