"""The `pantheon` command: one-shot generation and interactive chat with one model; `pantheon router` hands off."""

import argparse
import os
import subprocess
import sys

from pantheon import __version__
from pantheon.errors import PantheonError

BACKEND = "cpu"


def _positive_int(text):
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _number(text):
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


# llama-cli's sampler flags: flag, SamplingParams field, type, llama.cpp's default (pantheon.engine.sampler)
SAMPLER_FLAGS = (("--min-p", "min_p", _number, 0.05), ("--repeat-penalty", "repeat_penalty", _number, 1.0),
                 ("--repeat-last-n", "repeat_last_n", int, 64),
                 ("--presence-penalty", "presence_penalty", _number, 0.0),
                 ("--frequency-penalty", "frequency_penalty", _number, 0.0), ("--typical", "typical_p", _number, 1.0),
                 ("--top-nsigma", "top_n_sigma", _number, -1.0),
                 ("--xtc-probability", "xtc_probability", _number, 0.0),
                 ("--xtc-threshold", "xtc_threshold", _number, 0.1),
                 ("--dynatemp-range", "dynatemp_range", _number, 0.0),
                 ("--dynatemp-exp", "dynatemp_exponent", _number, 1.0), ("--mirostat", "mirostat", int, 0),
                 ("--mirostat-lr", "mirostat_eta", _number, 0.1), ("--mirostat-ent", "mirostat_tau", _number, 5.0),
                 ("--dry-multiplier", "dry_multiplier", _number, 0.0), ("--dry-base", "dry_base", _number, 1.75),
                 ("--dry-allowed-length", "dry_allowed_length", int, 2),
                 ("--dry-penalty-last-n", "dry_penalty_last_n", int, -1), ("--min-keep", "min_keep", int, 0))


def _add_sampler_flags(p):
    group = p.add_argument_group("samplers (llama.cpp's names, meanings and defaults)")
    for flag, field, kind, default in SAMPLER_FLAGS:
        group.add_argument(flag, dest=field, type=kind, default=default, metavar="N" if kind is int else "F")
    group.add_argument("--dry-sequence-breaker", dest="dry_sequence_breakers", action="append", metavar="TEXT",
                       help="DRY sequence breaker; repeatable (default: newline, colon, double quote, asterisk)")


def build_parser():
    p = argparse.ArgumentParser(prog="pantheon", description="One-shot generation and chat with a GGUF or HuggingFace model.")
    p.add_argument("--model", metavar="PATH",
                   help="GGUF file, HF model directory or .safetensors file (default: the bundled demo model)")
    p.add_argument("--prompt", default="Hello", help="one-shot prompt; the chat template applies unless --raw")
    p.add_argument("--raw", action="store_true", help="send --prompt without the chat template")
    p.add_argument("--chat", action="store_true", help="interactive multi-turn chat on stdin")
    p.add_argument("--system", metavar="TEXT", help="system prompt (chat mode)")
    p.add_argument("--max-tokens", type=_positive_int, default=128, metavar="N")
    p.add_argument("--temperature", type=_number, default=0.8, metavar="F")
    p.add_argument("--top-p", type=_number, default=0.9, metavar="F")
    p.add_argument("--top-k", type=int, default=40, metavar="N")
    p.add_argument("--seed", type=int, default=None, metavar="N", help="sampling seed (same seed, same text)")
    p.add_argument("--threads", type=_positive_int, default=None, metavar="N", help="engine threads")
    p.add_argument("--config", metavar="PATH", help="HuggingFace config.json, when not beside the safetensors weights")
    p.add_argument("--vocab", metavar="PATH", help="RWKV World vocabulary (not supported yet)")
    p.add_argument("--quantize", action="store_true", help="INT8 (Q8_0) weights at load")
    p.add_argument("--bench", action="store_true", help="report tokens/s and memory; JSON last on stderr")
    p.add_argument("--version", action="store_true", help="print version, backend and build")
    p.add_argument("--backend", action="store_true", help="print the backend token")
    _add_sampler_flags(p)
    return p


def build_commit():
    """The git commit this code runs from, or "unknown" outside a checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["router"]:
        from pantheon.router.main import main as router_main

        return router_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"Pantheon v{__version__}\nbackend={BACKEND} build={build_commit()}")
        return 0
    if args.backend:
        print(BACKEND)
        return 0
    if args.vocab:
        parser.error("--vocab (RWKV) models are not supported yet")
    if args.config and not args.model:
        parser.error("--config names the config.json of a --model; give --model too")
    from pantheon.oneshot import run

    try:
        return run(args)
    except (PantheonError, OSError) as e:
        print(f"pantheon: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
