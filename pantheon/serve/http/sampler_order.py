"""llama-server's `samplers` list, mapped onto Pantheon's fixed chain: what runs, and whether the order holds."""

from pantheon.engine.sampler import SamplingParams
from pantheon.serve.http.field_types import bad, show

# Pantheon's chain, in llama.cpp's default order (penalties, then the filters, temperature last), with
# llama.cpp's infill sampler (not in its default chain) where FIM clients put it: after the filters.
CHAIN = ("penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc", "infill", "temperature")
# llama.cpp's names and one-letter codes for them.
NAMES = {"penalties": "penalties", "top_k": "top_k", "top-k": "top_k", "top_p": "top_p", "top-p": "top_p",
         "nucleus": "top_p", "min_p": "min_p", "min-p": "min_p", "temperature": "temperature", "temp": "temperature",
         "dry": "dry", "typ_p": "typical_p", "typ-p": "typical_p", "typical_p": "typical_p", "typical-p": "typical_p",
         "typical": "typical_p", "typ": "typical_p", "xtc": "xtc", "top_n_sigma": "top_n_sigma",
         "top-n-sigma": "top_n_sigma", "infill": "infill"}
LETTERS = {"e": "penalties", "k": "top_k", "p": "top_p", "m": "min_p", "t": "temperature", "d": "dry",
           "y": "typical_p", "x": "xtc", "s": "top_n_sigma", "i": "infill"}
# The value that makes each sampler the identity: what a sampler left out of the list amounts to.
NEUTRAL = {"penalties": {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
           "dry": {"dry_multiplier": 0.0}, "top_n_sigma": {"top_n_sigma": -1.0}, "top_k": {"top_k": 0},
           "typical_p": {"typical_p": 1.0},
           "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0}, "xtc": {"xtc_probability": 0.0},
           "temperature": {"temperature": 1.0, "dynatemp_range": 0.0}}
# What a request that sets none of them samples with (SamplingParams' defaults).
DEFAULTS = {k: getattr(SamplingParams(), k) for k in (
    "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty", "infill",
    "top_n_sigma", "typical_p", "xtc_probability", "xtc_threshold", "dynatemp_range", "dry_multiplier", "dry_base",
    "dry_penalty_last_n")}


def samplers(name, v):
    """A list of sampler names or a string of llama.cpp's letters, as the samplers of our chain it names
    (in the client's order). Names llama.cpp does not know are skipped, as llama-server skips them."""
    if isinstance(v, str):
        picked = [LETTERS.get(c) for c in v]
    elif isinstance(v, list) and all(isinstance(s, str) for s in v):
        picked = [NAMES.get(s.lower()) for s in v]
    else:
        raise bad(name, f"expected a list of sampler names or a string of their letters, got {show(v)}")
    return tuple(s for s in picked if s is not None)


def spelled(order):
    """`order` (checked `samplers`, None for the default) in llama.cpp's names, as its settings show it."""
    named = tuple(s for s in CHAIN if s != "infill") if order is None else order  # infill: only when listed
    return ["typ_p" if s == "typical_p" else s for s in named]


def apply(sampling, order):
    """`sampling` (the fields a client set) as llama-server runs them with `order` (checked `samplers`):
    a sampler left out does nothing, so it is set neutral; one that does something must keep our place."""
    if order is None or sampling.get("mirostat"):  # mirostat replaces the chain, as in llama.cpp
        return sampling
    out = dict(sampling, **({"infill": True} if "infill" in order else {}))  # only a list turns it on
    for s in CHAIN:
        if s not in order and s in NEUTRAL:
            out.update(NEUTRAL[s])
    settings = {**DEFAULTS, **out}
    acting = [s for s in order if _acts(s, settings)]
    if acting != sorted(acting, key=CHAIN.index):
        raise bad("samplers", f"Pantheon runs {', '.join(CHAIN)} in that order; samplers "
                  f"{', '.join(acting)} (those that change anything here) are in another", "unsupported_value")
    return out


def _acts(sampler, p):
    """Whether `sampler` changes the draw under settings `p` (a greedy draw is order-free unless a sampler that
    can drop the best token runs: typical_p, xtc, infill; SamplingParams.greedy)."""
    if sampler == "penalties":
        return p["repeat_penalty"] != 1.0 or p["presence_penalty"] != 0.0 or p["frequency_penalty"] != 0.0
    if sampler == "temperature":
        return (p["temperature"] != 1.0 or p["dynatemp_range"] > 0.0) and (
            p["temperature"] != 0.0 or p["infill"] or p["dynatemp_range"] > 0.0 or _acts("typical_p", p)
            or _acts("xtc", p))
    if sampler == "infill":
        return p["infill"]
    if sampler == "top_n_sigma":
        return p["top_n_sigma"] > 0.0
    if sampler == "dry":
        return p["dry_multiplier"] != 0.0 and p["dry_base"] >= 1.0 and p["dry_penalty_last_n"] != 0
    if sampler == "xtc":
        return p["xtc_probability"] > 0.0 and p["xtc_threshold"] <= 0.5
    return p[sampler] != NEUTRAL[sampler][sampler]
