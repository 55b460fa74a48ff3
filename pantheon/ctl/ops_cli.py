"""The operations commands of pantheon-ctl: pull (derive, gate, download), verify, bench."""

import dataclasses

from pantheon.ctl.bench import run_bench as bench
from pantheon.ctl.pull import run_pull as pull
from pantheon.ctl.verify import run_verify as verify
from pantheon.serve.flag_values import int_in, parse_id, parse_path
from pantheon.serve.limits import DEFAULT_BATCH_SLOTS, DEFAULT_CTX_CAP, DEFAULT_DIES

HF_ENDPOINT_ENV = "HF_ENDPOINT"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
DEFAULT_STREAMS = 4
DEFAULT_PROMPT_TOKENS = 512
DEFAULT_GEN_TOKENS = 64


def ops_commands(Command, Flag, parse_size, dies, ctx, slots, available, vram):
    """The Command rows of pull, verify and bench (main.py's tables; classes passed in, not imported,
    because main imports this module)."""
    switch = lambda name, dest, text: Flag(name, dest, None, None, text)  # noqa: E731
    pull_flags = (dies, ctx, slots, available, vram,
                  Flag("--models-dir", "models_dir", "DIR", _path, "where the GGUF (or the HF repo's directory) goes (created if needed)"),
                  Flag("--name", "name", "ID", parse_id, "served name with --load [default: file name]"),
                  switch("--recommend", "recommend", "print the one-line fit verdict; download nothing"),
                  switch("--yes", "yes", "accept a FITS-TIGHT or medium-confidence gate without asking"),
                  switch("--force", "force", "download even when a gate stops it"),
                  switch("--load", "load", "load it into the server at --url once downloaded"))
    verify_flags = (switch("--full", "full", "the functional checks (chat, streaming, stop, ctx, tools, json "
                                             "schema, concurrency, cache reuse)"),
                    switch("--stress", "stress", "needle-in-a-haystack ladder and a long tool-response prefill"))
    bench_flags = (Flag("--streams", "streams", "N", int_in(1, 64), f"up to N concurrent streams [default: "
                                                                     f"{DEFAULT_STREAMS}]"),
                   Flag("--prompt-tokens", "prompt_tokens", "N", int_in(1, 1 << 20),
                        f"prompt length [default: {DEFAULT_PROMPT_TOKENS}]"),
                   Flag("--gen-tokens", "gen_tokens", "N", int_in(1, 1 << 16),
                        f"tokens generated per stream [default: {DEFAULT_GEN_TOKENS}]"),
                   Flag("--chart", "chart", "PNG", _path, "chart file [default: bench-MODEL.png]"),
                   switch("--record", "record", "append the measured row to the model family's catalog file"))
    return (Command("pull", "SOURCE", "target", pull_flags,
                    "derive, gate, download a GGUF or HF safetensors repo (OWNER/NAME[@REV][:FILE|:QUANT], URL, path)", parse=_path),
            Command("verify", "MODEL", "target", verify_flags, "smoke-test a served model (--full, --stress)",
                    parse=parse_id),
            Command("bench", "MODEL", "target", bench_flags, "prompt and generation tokens/s at 1..N streams",
                    parse=parse_id))


def _path(flag, text):
    return parse_path(flag, text)


def run_pull(inv, client, out, err):
    inv = dataclasses.replace(inv, dies=inv.dies or DEFAULT_DIES, ctx=inv.ctx or DEFAULT_CTX_CAP,
                              slots=inv.slots or DEFAULT_BATCH_SLOTS)
    return pull(inv, client, out, err, inv.hf_endpoint)


def run_verify(inv, client, out, err):
    return verify(inv, out, err)


def run_bench(inv, client, out, err):
    return bench(inv, out, err, streams=inv.streams or DEFAULT_STREAMS,
                 prompt_tokens=inv.prompt_tokens or DEFAULT_PROMPT_TOKENS, gen_tokens=inv.gen_tokens or DEFAULT_GEN_TOKENS)


OPS_RUNNERS = {"pull": run_pull, "verify": run_verify, "bench": run_bench}
