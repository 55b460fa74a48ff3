"""Bounded prompt work: text that cannot fit the context is refused before it is tokenized."""

from pantheon.serve.http.backend import ContextOverBudget


def check_text_fits(served, text, what):
    """Refuse, before tokenizing, a text too long for the context whatever its tokens: bounds the
    front's work and memory per request by the context, not by the body size."""
    if served.prompts.cannot_fit(text, served.n_ctx - 1):
        raise ContextOverBudget(f"{what} has {len(text)} characters: more than {served.n_ctx - 1} tokens of at "
                                f"most {served.tokenizer.max_token_chars} characters each can hold, so it does "
                                f"not fit the context of {served.n_ctx} tokens of model {served.name}")
