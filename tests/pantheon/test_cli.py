"""bin/pantheon as a user runs it: one-shot, chat on piped stdin and a pseudo-terminal, every flag."""

import json
import os
import pathlib
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from tests.conftest import shared_path

pytestmark = pytest.mark.usefixtures("compiled_kernels")  # the CLI runs under subprocess timeouts

ROOT = pathlib.Path(__file__).resolve().parents[2]
PANTHEON = [sys.executable, str(ROOT / "bin" / "pantheon")]


def run(*args, stdin=None, timeout=300):
    return subprocess.run(PANTHEON + list(args), input=stdin, capture_output=True, text=True, timeout=timeout)


def english_share(text):
    """Share of words that appear in CPython's bundled documentation (the demo model's corpus)."""
    import pydoc_data.topics

    vocab = set(re.findall(r"[a-z]+", " ".join(pydoc_data.topics.topics.values()).lower()))
    words = re.findall(r"[a-z]+", text.lower())
    return sum(w in vocab for w in words) / max(1, len(words)), len(words)


def test_demo_model_prints_english_words():
    out = run("--prompt", "The meaning of", "--max-tokens", "20", "--seed", "1")
    assert out.returncode == 0, out.stderr
    share, n = english_share(out.stdout)
    assert n >= 5 and share >= 0.8, out.stdout


def test_bench_reports_json_last_on_stderr():
    out = run("--prompt", "Hello", "--max-tokens", "8", "--bench", "--temperature", "0")
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stderr.strip().splitlines()[-1])
    assert set(stats) >= {"prompt_tokens", "prefill_tokens_per_s", "generated_tokens", "decode_tokens_per_s",
                          "peak_rss_mb"}
    assert 1 <= stats["generated_tokens"] <= 8 and stats["peak_rss_mb"] > 0


def test_every_flag_is_accepted():
    model = str(shared_path("golden", "llama-f16.gguf"))
    out = run("--model", model, "--prompt", "Hi", "--raw", "--max-tokens", "3", "--temperature", "0.5",
              "--top-p", "0.8", "--top-k", "5", "--seed", "3", "--threads", "1", "--quantize", "--bench")
    assert out.returncode == 0, out.stderr
    same = run("--model", model, "--prompt", "Hi", "--raw", "--max-tokens", "3", "--temperature", "0.5",
               "--top-p", "0.8", "--top-k", "5", "--seed", "3", "--threads", "1", "--quantize")
    assert same.stdout == out.stdout  # same seed, same text


def test_version_and_backend():
    out = run("--version")
    assert out.returncode == 0 and re.fullmatch(r"Pantheon v\S+\nbackend=cpu build=\S+\n", out.stdout)
    assert run("--backend").stdout == "cpu\n"
    assert "usage: pantheon" in run("-h").stdout


@pytest.mark.parametrize("args", [["--bogus"], ["--max-tokens", "0"], ["--max-tokens", "ten"],
                                  ["--temperature", "hot"], ["--config", "c.json"], ["--vocab", "v.txt"],
                                  ["--threads", "-1"]])
def test_bad_flags_exit_with_usage(args):
    out = run(*args)
    assert out.returncode == 2 and "usage: pantheon" in out.stderr


def test_bad_values_and_files_are_clear_errors(tmp_path):
    assert "temperature" in run("--temperature", "-1").stderr
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"nope")
    out = run("--model", str(bad))
    assert out.returncode == 1 and "GGUF magic" in out.stderr


def test_chat_on_piped_stdin_keeps_context():
    out = run("--chat", "--system", "Be brief.", "--max-tokens", "6", "--temperature", "0",
              stdin="What is a list?\nAnd a tuple?\n")
    assert out.returncode == 0, out.stderr
    assert len([line for line in out.stdout.split("\n") if line.strip()]) >= 2


def test_chat_through_a_pseudo_terminal():
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, PANTHEON + ["--chat", "--max-tokens", "5", "--temperature", "0"])
    seen = read_until(fd, b"> ", 120)
    os.write(fd, b"What is a class?\n")
    seen += read_until(fd, b"> ", 120)
    os.write(fd, b"\x04")  # end of input
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert seen.count(b"> ") >= 2


def read_until(fd, marker, timeout):
    got, deadline = b"", time.monotonic() + timeout
    while marker not in got:
        assert time.monotonic() < deadline, got
        if select.select([fd], [], [], 1)[0]:
            got += os.read(fd, 4096)
    return got


def test_hf_directory_and_safetensors_with_config(tmp_path):
    """An HF directory, then its .safetensors file with --config from elsewhere: same greedy tokens."""
    from tests.pantheon.hf.tinyhf import make_hf

    d, _, _ = make_hf(tmp_path / "m", "qwen2")
    common = ["--prompt", "Hello", "--max-tokens", "4", "--temperature", "0", "--quantize", "--bench"]
    a = run("--model", str(d), *common)
    assert a.returncode == 0, a.stderr
    import tokenizers

    turn = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"  # tinyhf's template, no BOS
    want = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json")).encode(turn).ids
    assert json.loads(a.stderr.splitlines()[-1])["prompt_tokens"] == len(want)
    moved = tmp_path / "meta"
    moved.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (d / name).rename(moved / name)
    b = run("--model", str(d / "model.safetensors"), "--config", str(moved / "config.json"), *common)
    assert b.returncode == 0 and b.stdout == a.stdout, b.stderr
    c = run("--model", str(d / "model.safetensors"), *common)
    assert c.returncode == 1 and "give --config" in c.stderr


def test_llama_clis_sampler_flags_reach_the_sampler():
    model = str(shared_path("golden", "llama-q8_0.gguf"))
    base = ("--model", model, "--prompt", "Hi", "--raw", "--max-tokens", "6", "--seed", "4")
    greedy = run(*base, "--temperature", "0")
    narrowed = run(*base, "--temperature", "1.5", "--mirostat", "2", "--mirostat-ent", "0.01")  # the best only
    assert greedy.returncode == narrowed.returncode == 0, narrowed.stderr
    assert narrowed.stdout == greedy.stdout
    one = ("--temperature", "10000", "--top-p", "0.01", "--min-p", "1")  # the best token alone ...
    assert run(*base, *one).stdout == greedy.stdout
    assert run(*base, *one, "--min-keep", "5").stdout != greedy.stdout  # ... unless five are kept
    everything = ("--min-p", "0.01", "--repeat-penalty", "1.1", "--repeat-last-n", "32", "--presence-penalty", "0.1",
                  "--frequency-penalty", "0.1", "--typical", "0.95", "--top-nsigma", "3", "--xtc-probability", "0.5",
                  "--xtc-threshold", "0.2", "--dynatemp-range", "0.3", "--dynatemp-exp", "1.2",
                  "--dry-multiplier", "0.8", "--dry-base", "1.75", "--dry-allowed-length", "2",
                  "--dry-penalty-last-n", "64", "--dry-sequence-breaker", "\n", "--dry-sequence-breaker", "###",
                  "--min-keep", "3")
    first, second = run(*base, *everything), run(*base, *everything)
    assert first.returncode == 0 and first.stdout == second.stdout, first.stderr


@pytest.mark.parametrize("args, field", [(("--typical", "2"), "typical_p"), (("--mirostat", "3"), "mirostat"),
                                         (("--dry-penalty-last-n", "-5"), "dry_penalty_last_n"),
                                         (("--min-keep", "-1"), "min_keep")])
def test_a_sampler_value_out_of_range_is_refused_before_a_model_loads(args, field):
    out = run("--model", "/nonexistent.gguf", *args)
    assert out.returncode == 1 and field in out.stderr and "nonexistent" not in out.stderr
