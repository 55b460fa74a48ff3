"""Logprobs in OpenAI's chat and completions shapes and llama-server's completion_probabilities."""

import math

from pantheon.text.detokenize import Detokenizer

FLOOR = -9999.0  # what OpenAI reports for a token the model gives no probability at all (JSON has no -inf)


def _number(lp):
    return lp if math.isfinite(lp) and lp > FLOOR else FLOOR


class TokenText:
    """Each token's own text and UTF-8 bytes (control tokens spelled out), cached per id. `post_sampling`
    (llama-server's post_sampling_probs): the scores are the sampler's probabilities (their logs), shown as
    `prob` and `top_probs` where they would be `logprob` and `top_logprobs`. `as_ids` (vLLM's
    return_tokens_as_token_ids): each token reads "token_id:N", so that one not whole UTF-8 is still known."""

    def __init__(self, tokenizer, post_sampling=False, as_ids=False):
        self.tokenizer, self.post_sampling, self.as_ids = tokenizer, post_sampling, as_ids
        self._seen = {}

    def __call__(self, tid):
        """(text, bytes): a token that is not whole UTF-8 reads "bytes:\\xNN..." as in OpenAI's answers."""
        hit = self._seen.get(tid)
        if hit is None:
            raw = self.tokenizer.token_bytes(tid, special=True)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
            hit = self._seen[tid] = (f"token_id:{tid}" if self.as_ids else text, list(raw))
        return hit


def chat_content(spell, scores):
    """choice.logprobs.content: one entry per token with its top_logprobs (best first)."""
    top = "top_probs" if spell.post_sampling else "top_logprobs"
    return [dict(_chat_entry(spell, s.token, s.logprob),
                 **{top: [_chat_entry(spell, t, lp) for t, lp in s.top]}) for s in scores]


def _chat_entry(spell, tid, lp):
    text, raw = spell(tid)
    return {"token": text, **_value(spell, lp), "bytes": raw}


def _value(spell, lp):
    """{"logprob": lp}, or {"prob": its probability} for post-sampling scores (llama-server's names)."""
    return {"prob": math.exp(lp)} if spell.post_sampling else {"logprob": _number(lp)}


def chat_logprobs(spell, scores):
    return {"content": chat_content(spell, scores), "refusal": None}


def completion_logprobs(spell, scores, offsets):
    """text_completion's logprobs: tokens, token_logprobs, top_logprobs (token -> logprob, the chosen token
    always among them, so up to k + 1 entries) and each token's character offset in the choice's text."""
    tokens, values, tops = [], [], []
    for s in scores:
        tokens.append(spell(s.token)[0])
        values.append(_number(s.logprob))
        top = {spell(t)[0]: _number(lp) for t, lp in s.top}
        top.setdefault(tokens[-1], values[-1])
        tops.append(top)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": list(offsets)}


def echoed_logprobs(spell, ids, scores, offsets):
    """The echoed prompt's part of text_completion logprobs: its first token unscored (null, as OpenAI
    answers: nothing predicts it), each later one as the die scored it (`scores`, for ids[1:])."""
    part = completion_logprobs(spell, scores, offsets[1:len(scores) + 1])
    return {"tokens": [spell(ids[0])[0]] + part["tokens"], "token_logprobs": [None] + part["token_logprobs"],
            "top_logprobs": [None] + part["top_logprobs"], "text_offset": offsets[:1] + part["text_offset"]}


def joined(*parts):
    """text_completion logprobs objects one after another (the echoed prompt's, then the completion's)."""
    return {key: [v for part in parts for v in part[key]] for key in parts[0]}


def text_offsets(tokenizer, ids, limit):
    """Each token's character offset in the decoded `ids` (cut to `limit`, the echoed text's length)."""
    detok, out, at = Detokenizer(tokenizer), [], 0
    for tid in ids:
        out.append(min(at, limit))
        at += len(detok.push(tid))
    return out


def native_probabilities(spell, scores):
    """llama-server's completion_probabilities: id, token, bytes, logprob and top_logprobs per token (prob and
    top_probs for post-sampling scores)."""
    top = "top_probs" if spell.post_sampling else "top_logprobs"
    return [dict(_native_entry(spell, s.token, s.logprob),
                 **{top: [_native_entry(spell, t, lp) for t, lp in s.top]}) for s in scores]


def _native_entry(spell, tid, lp):
    text, raw = spell(tid)
    return {"id": tid, "token": text, "bytes": raw, **_value(spell, lp)}


def prompt_entries(tokenizer, scores, k):
    """vLLM's prompt_logprobs: null for the first prompt token (nothing predicts it), then per scored token
    {id: {logprob, rank, decoded_token}}, the token itself first, then its k best alternatives ranked 1..k (a
    token among them shows that rank, as vLLM's dict keeps the later value)."""
    def entry(tid, lp, rank):
        text = tokenizer.token_bytes(tid, special=True).decode("utf-8", errors="replace")
        return {"logprob": _number(lp), "rank": rank, "decoded_token": text}

    out = [None]
    for s in scores:
        shown = {str(s.token): entry(s.token, s.logprob, s.rank)}
        shown.update((str(t), entry(t, lp, r)) for r, (t, lp) in enumerate(s.top[:k], 1))
        out.append(shown)
    return out
