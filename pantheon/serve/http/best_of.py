"""best_of: of the candidates generated for each prompt, answer the n with the highest logprob per token."""

import math


def best(picks, bodies, n, best_of):
    """The answered choice bodies: per prompt (candidates prompt x best_of + k), the n candidates of highest
    mean token logprob, best first and renumbered prompt x n + rank, as OpenAI answers best_of."""
    if best_of <= n:
        return bodies
    out = []
    for start in range(0, len(picks), best_of):
        group = range(start, start + best_of)
        ranked = sorted(group, key=lambda i: -per_token(picks[i].gen.scores))  # stable: ties keep their order
        for rank, i in enumerate(ranked[:n]):
            out.append(dict(bodies[i], index=start // best_of * n + rank))
    return out


def per_token(scores):
    """Mean logprob of a candidate's scored tokens; one that scored none ranks last."""
    return math.fsum(s.logprob for s in scores) / len(scores) if scores else -math.inf
