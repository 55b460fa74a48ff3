"""llama-server's `timings` object: prompt and generation counts, times and rates of a response's generations."""

import time


def final(gens):
    """The whole object for ended generations (one choice, or every choice of a response): prompt time
    runs from the request's start to the first token of any of them, generation time from there to the
    last end. Choices after the first of a prompt count no prompt tokens (Generation.usage)."""
    gens = list(gens)
    now = time.perf_counter()
    started = min(g.started for g in gens)
    end = max((g.ended_at or now for g in gens), default=now)
    first = min((g.first_at for g in gens if g.first_at is not None), default=end)  # no token: all prompt
    cached = sum(g.usage["prompt_tokens_details"]["cached_tokens"] for g in gens)
    prompt = sum(g.usage["prompt_tokens"] for g in gens) - cached
    predicted = sum(g.usage["completion_tokens"] for g in gens)
    return dict(cache_n=cached, **_rate("prompt", prompt, (first - started) * 1000),
                **_rate("predicted", predicted, (end - first) * 1000))


def partial(gen):
    """What a stream chunk can tell while `gen` runs (llama-server's timings_per_token): the generation
    so far, the time to its first token and, once that token has come with them, the prompt and cache
    counts (before it they are not known here, and are left out rather than guessed)."""
    now = time.perf_counter()
    first = gen.first_at or now
    out = _rate("predicted", gen.tokens, (now - first) * 1000)
    prompt_ms = (first - gen.started) * 1000
    if gen.prompt_seen is None:
        return dict(out, prompt_ms=prompt_ms)
    prompt, cached = gen.prompt_seen
    return dict(out, cache_n=cached, **_rate("prompt", prompt - cached, prompt_ms))


def _rate(kind, n, ms):
    return {f"{kind}_n": n, f"{kind}_ms": ms, f"{kind}_per_token_ms": ms / n if n else 0.0,
            f"{kind}_per_second": n * 1000.0 / ms if ms > 0 and n else 0.0}
