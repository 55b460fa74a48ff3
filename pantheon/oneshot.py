"""One model, one engine, one conversation in this process: what `pantheon` runs to generate and chat."""

import dataclasses
import json
import resource
import sys
import time

from pantheon import open_model
from pantheon.demo import demo_model_path
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.serve.environment import repack_from_env
from pantheon.serve.limits import DEFAULT_CTX_CAP
from pantheon.cli import SAMPLER_FLAGS
from pantheon.text import dry_breakers
from pantheon.text.detokenize import Detokenizer
from pantheon.text.prompting import PromptBuilder


class Session:
    """One model, one engine and one conversation: turns reuse the previous turns' KV cache."""

    def __init__(self, model, params, max_tokens):
        self.model, self.params, self.max_tokens = model, params, max_tokens
        self.engine = Engine(model, EngineConfig(n_ctx=min(model.config.n_ctx_train, DEFAULT_CTX_CAP), max_batch=1))
        self.prompts = PromptBuilder(model.tokenizer, model.chat_metadata)
        self.turn = 0

    def generate(self, ids, out):
        """Stream the reply to `out`; returns (text, stats)."""
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
    path = args.model
    if path is None:
        path = str(demo_model_path())
    repack, repack_dir = repack_from_env()
    return open_model(path, threads=args.threads, quantize=args.quantize, config=args.config, repack=repack,
                      repack_dir=repack_dir)


def sampling(args):
    """SamplingParams of the command line, checked before any model is opened (DRY's breakers come after)."""
    fields = {field: getattr(args, field) for _, field, _, _ in SAMPLER_FLAGS}
    return SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed, **fields)


def run(args, stdout=sys.stdout, stderr=sys.stderr):
    params = sampling(args)
    model = _open(args)
    if params.dry_multiplier:  # the breaker texts as the model's token sequences
        params = dataclasses.replace(params, dry_breakers=dry_breakers.breakers(model.tokenizer,
                                                                                 args.dry_sequence_breakers))
    session = Session(model, params, args.max_tokens)
    if args.chat:
        return chat_loop(session, args.system, sys.stdin, stdout)
    ids = session.prompts.raw(args.prompt) if args.raw else session.prompts.chat([{"role": "user", "content": args.prompt}])
    _, stats = session.generate(ids, stdout)
    stdout.write("\n")
    if args.bench:
        stderr.write(json.dumps(stats) + "\n")
    return 0
