"""vLLM's bad_words: a banned token sequence's last token is masked while the answer ends with the rest of it."""


def banned_next(words, generated):
    """The ids that would complete one of `words` (token-id tuples) right after `generated` (the answer's ids so
    far; the prompt does not count, as in vLLM): a one-token word always, a longer one after its other tokens."""
    out = []
    for word in words:
        head = word[:-1]
        if len(head) <= len(generated) and tuple(generated[len(generated) - len(head):]) == head:
            out.append(word[-1])
    return out
