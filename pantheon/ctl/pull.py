"""`pantheon-ctl pull SOURCE`: derive, gate, then download (and optionally load) only what passes."""

import os
import shutil
import sys

from pantheon.ctl import gate, hub
from pantheon.ctl.fit import vram_free
from pantheon.ctl.output import human_bytes, model_line, to_json
from pantheon.serve import fit

EXIT_OK, EXIT_TIGHT, EXIT_STOPPED, EXIT_FAILED = 0, 1, 3, 4
RECOMMEND_EXIT = {fit.FITS: EXIT_OK, fit.FITS_TIGHT: EXIT_TIGHT, fit.DOES_NOT_FIT: EXIT_STOPPED,
                  fit.REFUSED: EXIT_STOPPED}


def evaluate(inv, endpoint):
    """Derive and gate, no weight byte fetched: a gate.GateResult."""
    source = hub.parse_source(inv.target, endpoint)
    spec = gate.derive(source, endpoint)
    mem = fit.host_memory(inv.available)
    free, _ = vram_free([d for d in inv.dies if d.startswith("cuda")], inv.vram)
    return gate.run_gates(spec, inv.dies, inv.ctx, inv.slots, inv.models_dir, (mem.available, mem.total), free or {})


def report_text(result):
    spec = result.spec
    sha = f", sha256 {spec.sha256[:12]}..." if spec.sha256 else ""
    lines = [f"pull {spec.source.text}: {spec.name} ({human_bytes(spec.size)}{sha})",
             f"derive: spec from {spec.derived_from}"]
    lines += [f"  {code:<5} {name:<15} {status:<12} {detail}" for code, name, status, detail in result.gates]
    if result.verdict is not None:
        lines += [f"      {k:<22} {human_bytes(v)}" for k, v in result.verdict.numbers.items()]
    return "\n".join(lines) + "\n"


def recommend_line(result):
    """The one-line verdict: the [B] verdict as computed, its confidence and the caveat; never changed."""
    kind = result.verdict.kind if result.verdict else fit.REFUSED
    reason = result.verdict.reason if result.verdict else result.gates[-2][3]
    stop = f"; stopped at {result.stopped_at}" if result.stopped_at and kind != fit.DOES_NOT_FIT else ""
    return f"RECOMMEND: {kind} ({reason}; confidence {result.confidence}{stop}) -- {gate.CAVEAT}\n"


def run_pull(inv, client, out, err, endpoint, confirm=None):
    """The pull command; returns its exit status."""
    try:
        result = evaluate(inv, endpoint)
    except hub.HubError as e:
        err.write(f"pull: {e}\n")
        return EXIT_FAILED
    out.write(to_json(_summary(result)) if inv.json else report_text(result))
    if inv.recommend:
        out.write(recommend_line(result))
        kind = result.verdict.kind if result.verdict else fit.REFUSED
        return EXIT_STOPPED if result.stopped_at else RECOMMEND_EXIT[kind]
    if not _may_download(inv, result, out, err, confirm):
        return EXIT_STOPPED
    try:
        path = _fetch(result, out, err)
    except (hub.HubError, OSError) as e:
        err.write(f"pull: {e}\n")
        return EXIT_FAILED
    if inv.load:
        return _load(inv, client, path, out)
    out.write(f"load it: pantheon-ctl load {path}\n")
    return EXIT_OK


def _may_download(inv, result, out, err, confirm):
    if result.action == gate.STOP:
        where, why = _stop_reason(result)
        read = _read_note(result.spec)
        if not inv.force:
            err.write(f"pull: stopped at {where}: {why}; {read}, no download (--force downloads anyway)\n")
            return False
        err.write(f"pull: stopped at {where}: {why}; overridden by --force\n")
    if inv.models_dir is None:
        err.write("pull: --models-dir DIR is needed to download (or pass --recommend for the verdict only)\n")
        return False
    if result.action == gate.ACCEPT and not (inv.yes or inv.force):
        ask = confirm or _ask
        if not ask(f"{result.gates[-1][3]}; download {human_bytes(result.spec.size)}? [y/N] "):
            err.write("pull: not accepted: no weight byte was fetched (--yes accepts)\n")
            return False
    return True


def _read_note(spec):
    if not spec.header_read:
        return "no weight byte was read"
    what = "config.json and the safetensors headers: " if spec.downloads else "the header's first "
    return f"only {what}{human_bytes(spec.header_read)} of {human_bytes(spec.size)} were read"


def _stop_reason(result):
    """(gate, its detail): the first gate that failed, else [C1]."""
    for code, name, status, detail in result.gates:
        if f"{code} {name}" == result.stopped_at:
            return result.stopped_at, f"{status}: {detail}" if status not in ("FAIL",) else detail
    code, name, _, detail = result.gates[-1]
    return f"{code} {name}", detail


def _ask(question):
    if not sys.stdin.isatty():
        return False
    return input(question).strip().lower() in ("y", "yes")


def _fetch(result, out, err):
    spec = result.spec
    if result.already:
        out.write(f"already downloaded: {result.dest}\n")
        return result.dest
    if spec.source.kind == "local":
        os.makedirs(os.path.dirname(result.dest), exist_ok=True)
        if os.path.realpath(spec.location) != os.path.realpath(result.dest):
            shutil.copyfile(spec.location, result.dest)
        out.write(f"copied into {result.dest}\n")
        return result.dest
    resumed, fetched, checked = 0, 0, 0
    targets = spec.targets(os.path.dirname(result.dest))[1]
    for f, path in targets:
        if not (os.path.isfile(path) and os.path.getsize(path) == f.size):
            resumed += hub.download(f.url, path, f.size, f.sha256, progress=err)
            fetched, checked = fetched + 1, checked + bool(f.sha256)
    check = f"sha256 verified ({checked} of {fetched} files; the others' sizes checked)" if fetched > 1 else \
        "sha256 verified" if checked else "no sha256 published: size checked only"
    again = f", resumed at {human_bytes(resumed)}" if resumed else ""
    files = f"{fetched} of {len(targets)} files, " if spec.downloads else ""
    out.write(f"downloaded {result.dest} ({files}{human_bytes(spec.size)}{again}; {check})\n")
    return result.dest


def _load(inv, client, path, out):
    payload = client.load(os.path.abspath(path), name=inv.name, dies=inv.dies, ctx_cap=inv.ctx,
                          batch_slots=inv.slots, timeout=300, wait=max(inv.http_timeout, 310))
    out.write(model_line("loaded", payload.get("model", {})))
    return EXIT_OK


def _summary(result):
    return {"source": result.spec.source.text, "file": result.spec.name, "size": result.spec.size,
            "sha256": result.spec.sha256, "derived_from": result.spec.derived_from,
            "files": [f.name for f in result.spec.downloads] or [result.spec.name],
            "gates": [{"gate": c, "name": n, "status": s, "detail": d} for c, n, s, d in result.gates],
            "verdict": result.verdict.kind if result.verdict else fit.REFUSED,
            "numbers": dict(result.verdict.numbers) if result.verdict else {},
            "confidence": result.confidence, "action": result.action, "stopped_at": result.stopped_at}
