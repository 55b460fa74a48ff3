"""The package map as a rule: which package may import which, and where an import may hide in a function.

Every module's imports are read with `ast` (nothing is imported to check them). The rules are the ones
each package's docstring states; docs/architecture.md draws them.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("pantheon", "ipc", "workers")
STDLIB = frozenset(sys.stdlib_module_names)

# Pantheon's own modules each package may import (a prefix admits the module and everything below it).
INTERNAL = {
    "pantheon.errors": (),
    "pantheon.gguf": ("pantheon.gguf", "pantheon.errors"),
    "pantheon.hf": ("pantheon.hf", "pantheon.gguf", "pantheon.errors"),  # HF files, read like GGUF ones
    # the format-neutral opener: GGUF or HF weights, and the text side (tokenizer, chat metadata) of either
    "pantheon.source": ("pantheon.gguf", "pantheon.hf", "pantheon.text", "pantheon.errors"),
    "pantheon.engine": ("pantheon.engine", "pantheon.gguf", "pantheon.source", "pantheon.errors"),
    "pantheon.text": ("pantheon.text", "pantheon.gguf", "pantheon.hf", "pantheon.errors"),
    # serve runs in the supervisor and the fronts, which must not load numba: of the engine it may
    # import only the numba-free leaves (request parameters, memory facts for the CPU and GPU estimates) ...
    "pantheon.serve": ("pantheon.serve", "pantheon.gguf", "pantheon.hf", "pantheon.source", "pantheon.text",
                       "pantheon.errors", "pantheon.demo",
                       "pantheon.engine.sampler", "pantheon.engine.sizes", "pantheon.engine.cuda.sizing"),
    # the admin client: settings, the fit estimate and host memory; GGUF headers (pull, catalog, gates)
    "pantheon.ctl": ("pantheon.ctl", "pantheon.errors", "pantheon.gguf", "pantheon.hf", "pantheon.source",
                     "pantheon.serve.settings", "pantheon.serve.limits", "pantheon.serve.flag_values",
                     "pantheon.serve.environment", "pantheon.serve.fit", "pantheon.serve.memory"),
    "pantheon.demo": (),
    # the library facade and the one-process CLI join every layer for their users
    "pantheon": ("pantheon",),
    "pantheon.cli": ("pantheon",),
    "pantheon.convert": ("pantheon",),  # pantheon-convert, a standalone tool
    "pantheon.oneshot": ("pantheon",),  # the generation and chat side of `pantheon`
    "ipc": ("ipc",),
    "workers": ("workers", "ipc", "pantheon"),
}
# ... except the in-process backend, which is the one serving role that runs engines itself.
EXCEPTIONS = {"pantheon.serve.local_backend": ("pantheon.engine",)}
THIRD_PARTY = {
    "pantheon.errors": (), "pantheon.demo": (),
    "pantheon.gguf": ("numpy", "gguf"),
    "pantheon.hf": ("numpy", "gguf", "safetensors"),
    "pantheon.source": (),
    "pantheon.convert": ("numpy", "torch", "safetensors"),
    "pantheon.engine": ("numpy", "numba", "llvmlite", "gguf", "threadpoolctl", "cupy"),
    "pantheon.text": ("numpy", "jinja2", "tokenizers", "llguidance"),
    "pantheon.serve": ("numpy", "falcon", "psutil", "pynvml", "gguf"),
    "pantheon.ctl": ("huggingface_hub", "tqdm", "matplotlib"),
    "pantheon": (), "pantheon.cli": (), "pantheon.oneshot": (),
    "ipc": ("numpy", "posix_ipc"),
    "workers": ("numpy", "waitress"),
}
# Imports inside functions, each with the process-role reason it cannot be at the top of the module.
LAZY = {
    ("pantheon", "pantheon.engine.model"): "the facade is imported by every process; fronts and the "
                                           "supervisor must not load numba",
    ("pantheon", "pantheon.text.tokenizer"): "the facade is imported by every process",
    ("pantheon", "pantheon.source"): "the facade is imported by every process",
    ("pantheon.source", "pantheon.hf.directory"): "the HF reader loads only in a process that opens an HF model",
    ("pantheon.source", "pantheon.gguf.config"): "the opener is imported by the engine; each reader loads when "
                                                 "a file of its format is opened",
    ("pantheon.source", "pantheon.gguf.file"): "as pantheon.gguf.config",
    ("pantheon.source", "pantheon.text.hf_text"): "the text side runs in fronts; a die worker opening weights "
                                                  "never loads tokenizers",
    ("pantheon.source", "pantheon.text.tokenizer"): "as pantheon.text.hf_text",
    ("workers.worker", "pantheon.text.grammar"): "llguidance loads only in a die that runs a constrained request",
    ("pantheon.text.grammar", "llguidance"): "llguidance loads only when a request carries a grammar",
    ("pantheon.text.grammar", "llguidance.gbnf_to_lark"): "as llguidance",
    ("pantheon.text.grammar", "llguidance.numpy"): "as llguidance",
    ("pantheon.text.hf_tokenizer", "tokenizers"): "the tokenizers extension loads only in a front serving an "
                                                  "HF model",
    ("pantheon.cli", "pantheon.oneshot"): "`pantheon router` shares this entry point and must not load numba",
    ("pantheon.cli", "pantheon.router.main"): "as pantheon.oneshot: each subcommand loads only its own side",
    ("pantheon.serve.flag_values", "pantheon.text.chat"): "pantheon router and pantheon-ctl parse flags; Jinja "
                                                          "loads only when a --chat-template is given",
    ("pantheon.serve.flag_values", "pantheon.text.named_templates"): "as pantheon.text.chat",
    ("pantheon.convert", "torch"): "torch is the optional 'convert' extra; --help works without it",
    ("pantheon.convert", "pickle"): "only to name the error a refused checkpoint raises",
    ("pantheon.convert", "safetensors.torch"): "needs torch, the optional 'convert' extra",
    ("pantheon.serve.dies", "pynvml"): "NVML is optional: a host without the driver library still serves",
    ("workers.worker", "pantheon.engine.cuda.loader"): "numba-cuda's kernels and CuPy load only in a CUDA "
                                                       "die's own process, never in a CPU die's",
    ("pantheon.engine.cuda.backend", "numba"): "numba.cuda is imported only when a CUDA die opens its device: "
                                               "a missing CUDA stack is a typed UnsupportedDevice naming it",
    ("pantheon.engine.cuda.backend", "cupy"): "as numba.cuda (CuPy is the optional 'gpu' extra)",
    ("pantheon.engine.cuda.backend", "pantheon.engine.cuda.simfast"): "patches numba's CUDA simulator, only in "
                                                                      "a process that runs it",
    ("pantheon.engine.cuda.simfast", "numba.cuda.simulator"): "as pantheon.engine.cuda.simfast",
    ("pantheon.ctl.hub", "huggingface_hub"): "the Hub client loads only for pull, not for every pantheon-ctl "
                                             "command",
    ("pantheon.ctl.hub", "huggingface_hub.utils"): "as huggingface_hub",
    ("pantheon.ctl.hub", "huggingface_hub.file_download"): "as huggingface_hub",
    ("pantheon.ctl.hub", "tqdm"): "as huggingface_hub (its progress bar)",
    ("pantheon.ctl.bench", "matplotlib"): "the optional 'charts' extra: bench without --chart runs without it",
    ("pantheon.ctl.bench", "matplotlib.pyplot"): "as matplotlib",
    ("pantheon.ctl.verify", "pantheon.ctl.stress"): "stress imports verify's verdicts (a cycle otherwise)",
    ("workers.supervisor", "pantheon.engine.kernels.compile_cache"): "runs in the forked die worker, before "
                                                                     "workers.worker imports the kernels",
    ("workers.supervisor", "workers.worker"): "runs in the forked die worker: the engine (numba) never loads in "
                                              "the supervisor",
}


def modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def owner(module, table):
    """The most specific key of `table` that `module` falls under."""
    keys = [k for k in table if module == k or module.startswith(k + ".")]
    return max(keys, key=len)


def imports(module, path):
    """(imported module, lazy?, line) of every import statement, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in _module_level(tree.body)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".")[:len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(pkg + ([base] if base else []))
            names = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names]
        else:
            continue
        for name in names:
            yield name, id(node) not in top, node.lineno


def _module_level(body):
    """Statements that run at import: the module's own, and those of its top-level try / if blocks (an import
    with a fallback is not lazy)."""
    for node in body:
        yield node
        if isinstance(node, (ast.Try, ast.If)):
            inner = node.body + node.orelse + getattr(node, "finalbody", [])
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            yield from _module_level(inner)


def _is_module(dotted):
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _allowed(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


ALL = list(modules())


@pytest.mark.parametrize("module,path", ALL, ids=[m for m, _ in ALL])
def test_imports_follow_the_package_map(module, path):
    internal = INTERNAL[owner(module, INTERNAL)] + EXCEPTIONS.get(module, ())
    third = THIRD_PARTY[owner(module, THIRD_PARTY)]
    bad = []
    for name, _, line in imports(module, path):
        root = name.split(".")[0]
        if root in STDLIB or root == "__future__":
            continue
        ok = _allowed(name, internal) if root in PACKAGES else root in third
        ok = ok or (name == "pantheon" and module.startswith("pantheon"))  # the version, from the facade
        if not ok:
            bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module,path", ALL, ids=[m for m, _ in ALL])
def test_lazy_imports_have_a_process_role_reason(module, path):
    bad = [f"{path.relative_to(ROOT)}:{line} imports {name} inside a function"
           for name, lazy, line in imports(module, path) if lazy and (module, name) not in LAZY]
    assert not bad, "\n".join(bad)


def test_every_listed_lazy_import_still_exists():
    found = {(m, name) for m, p in ALL for name, lazy, _ in imports(m, p) if lazy}
    assert set(LAZY) <= found, set(LAZY) - found


def test_the_rules_catch_an_upward_import(tmp_path):
    """The checker itself: a text module importing the engine is reported."""
    fake = tmp_path / "bad.py"
    fake.write_text("import os\nfrom pantheon.engine.model import Model\n")
    names = [n for n, _, _ in imports("pantheon.text.bad", fake)]
    assert names == ["os", "pantheon.engine.model"]
    assert not _allowed("pantheon.engine.model", INTERNAL[owner("pantheon.text.bad", INTERNAL)])


ENGINE_USERS = ("pantheon.engine", "pantheon.oneshot", "pantheon.convert", "workers.worker")
NUMBA_FREE = [m for m, _ in ALL if not m.startswith(ENGINE_USERS) and m != "pantheon.serve.local_backend"] + ["pantheon.engine.sampler", "pantheon.engine.sizes"]


def test_supervisor_and_front_modules_load_no_numba():
    """Importing every module a supervisor or front process runs leaves numba unloaded."""
    code = (f"import importlib, sys\nfor m in {NUMBA_FREE!r}:\n    importlib.import_module(m)\n"
            "sys.exit('numba' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode == 0


def test_the_supervisor_loads_no_numba():
    """pantheon-serve's own process forks die workers and must stay CUDA- and numba-free; it preloads
    the HTTP stack (as gunicorn's --preload) so a forked front answers as soon as it is listed."""
    code = ("import sys, workers.serve, workers.supervisor\n"
            "sys.exit(sorted(m for m in ('numba', 'cupy') if m in sys.modules) != [])")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode == 0


def test_an_import_with_a_fallback_at_module_level_is_not_lazy(tmp_path):
    fake = tmp_path / "fallback.py"
    fake.write_text("try:\n    import json\nexcept ImportError:\n    import pickle\n\n\ndef f():\n    import csv\n")
    assert sorted((n, lazy) for n, lazy, _ in imports("pantheon.fallback", fake)) == [
        ("csv", True), ("json", False), ("pickle", False)]
