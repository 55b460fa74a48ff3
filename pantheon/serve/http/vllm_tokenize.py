"""vLLM's /tokenize and /detokenize beside llama-server's: a `prompt` or `messages` body, and vLLM's answer."""

from pantheon.serve.http import chat_plan, validate
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.field_types import boolean, only, string

PROMPT = {"model": string, "prompt": string, "add_special_tokens": boolean, "return_token_strs": boolean}
# a chat body is a chat completion's (its template, tools and kwargs render it), with these two besides
CHAT_EXTRAS = {"add_special_tokens": only(False, "the chat template writes the special tokens; vLLM adds none to "
                                                 "a rendered chat by default"),
               "return_token_strs": boolean}


def model_of(body):
    """The body's checked `model` (None when it names none): either shape names it the same way."""
    return validate.fields({"model": body.get("model")} if isinstance(body, dict) else body,
                           {"model": string}).get("model")


def asks(body):
    """Whether a /tokenize body is vLLM's (a `prompt` or `messages`; llama-server's has `content`)."""
    return isinstance(body, dict) and "content" not in body and ("prompt" in body or "messages" in body)


def tokenize(served, body, prefill_assistant=True):
    """vLLM's answer: the ids of the prompt (special tokens added unless add_special_tokens is false) or of the
    rendered chat (as the chat route would run it: a final assistant message continued as chat_plan.final_prefill
    says), their count, the context they must fit, and with return_token_strs the vocabulary's strings."""
    if "messages" in body:
        extras = validate.fields({k: body[k] for k in CHAT_EXTRAS if k in body}, CHAT_EXTRAS)
        parsed = validate.check({k: v for k, v in body.items() if k not in CHAT_EXTRAS}, validate.CHAT,
                                ("messages",))
        parsed, prefill = chat_plan.final_prefill(parsed, prefill_assistant)
        ids = chat_plan.prompt_ids(served, parsed, prefill)
    else:
        extras = validate.fields(body, PROMPT, ("prompt",))
        check_text_fits(served, extras["prompt"], "prompt")
        ids = served.tokenizer.encode(extras["prompt"], add_special=extras.get("add_special_tokens", True),
                                      parse_special=True)
    strs = [served.tokenizer.tokens[i] for i in ids] if extras.get("return_token_strs") else None
    return {"count": len(ids), "max_model_len": served.n_ctx, "tokens": list(ids), "token_strs": strs}
