"""The `pantheon` command: one-shot generation and interactive chat with one model; `pantheon router` hands off."""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

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


class Session:
    """One model, one engine and one conversation: turns reuse the previous turns' KV cache."""

    def __init__(self, model, params, max_tokens):
        from pantheon.engine.scheduler import Engine, EngineConfig
        from pantheon.text.prompting import PromptBuilder

        self.model, self.params, self.max_tokens = model, params, max_tokens
        self.engine = Engine(model, EngineConfig(n_ctx=min(model.config.n_ctx_train, 4096), max_batch=1))
        self.prompts = PromptBuilder(model.tokenizer, model.chat_metadata)
        self.turn = 0

    def generate(self, ids, out):
        """Stream the reply to `out`; returns (text, stats)."""
        from pantheon.text.detokenize import Detokenizer
        from pantheon.engine.scheduler import Request, TokenEvent

        self.turn += 1
        self.engine.add(Request(self.turn, tuple(ids), self.max_tokens, self.params,
                                frozenset(self.model.tokenizer.stop_ids), session="cli"))
        detok, pieces, times = Detokenizer(self.model.tokenizer), [], [time.perf_counter()]
        while self.engine.has_work:
            for ev in self.engine.step():
                if isinstance(ev, TokenEvent):
                    times.append(time.perf_counter())
                    pieces.append(detok.push(ev.token))
                    out.write(pieces[-1])
                    out.flush()
        pieces.append(detok.flush())
        out.write(pieces[-1])
        return "".join(pieces), _stats(len(ids), times)


def _stats(n_prompt, times):
    n_gen = len(times) - 1
    prefill_s = times[1] - times[0] if n_gen else times[-1] - times[0]
    decode_s = times[-1] - times[1] if n_gen > 1 else 0.0
    return {"prompt_tokens": n_prompt,
            "prefill_tokens_per_s": round(n_prompt / prefill_s, 2) if prefill_s > 0 else 0.0,
            "generated_tokens": n_gen,
            "decode_tokens_per_s": round((n_gen - 1) / decode_s, 2) if decode_s > 0 else 0.0,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def chat_loop(session, system, stdin, stdout):
    messages = [{"role": "system", "content": system}] if system else []
    interactive = stdin.isatty()
    while True:
        if interactive:
            stdout.write("> ")
            stdout.flush()
        line = stdin.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line.rstrip("\n")})
        reply, _ = session.generate(session.prompts.chat(messages), stdout)
        stdout.write("\n")
        messages.append({"role": "assistant", "content": reply})


def _open(args):
    from pantheon.engine.model import open_model

    path = args.model
    if path is None:
        from pantheon.demo import demo_model_path

        path = str(demo_model_path())
    return open_model(path, threads=args.threads, quantize=args.quantize, config=args.config)


def run(args, stdout=sys.stdout, stderr=sys.stderr):
    from pantheon.engine.sampler import SamplingParams

    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    session = Session(_open(args), params, args.max_tokens)
    if args.chat:
        return chat_loop(session, args.system, sys.stdin, stdout)
    ids = session.prompts.raw(args.prompt) if args.raw else session.prompts.chat([{"role": "user", "content": args.prompt}])
    _, stats = session.generate(ids, stdout)
    stdout.write("\n")
    if args.bench:
        stderr.write(json.dumps(stats) + "\n")
    return 0


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
    try:
        return run(args)
    except (PantheonError, OSError) as e:
        print(f"pantheon: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
