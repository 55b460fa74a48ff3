"""A die worker: owns the models placed on one die, runs their engines, streams tokens to the fronts."""

import faulthandler
import logging
import os
import signal
import sys
import time
import traceback

from ipc.errors import FrameError
from pantheon.engine.model import open_model
from pantheon.engine.scheduler import EmbeddingEvent, Engine, EngineConfig, PromptLogprobsEvent, Request, TokenEvent
from pantheon.engine.warmup import warm_up
from pantheon.errors import PantheonError, UnsupportedDevice
from pantheon.serve.environment import Operations
from pantheon.serve.settings import context_size
from workers import protocol
from workers.protocol import ErrorCode, Kind
from workers.lifecycle import heartbeat_interval
from workers.slots import with_pooling
from workers.tables import text

IDLE_WAIT_S = 0.05
EXIT_FLUSH_S = 2.0
LOAD_GRACE_S = 900.0  # a die loading a model at run time is not judged by its heartbeat meanwhile


class DieWorker:
    """The step loop of one die: drain the dispatch ring, step every engine with work, send events."""

    def __init__(self, layout, die_index, die, slots, threads, repack=True, repack_dir=None):
        self.layout, self.d, self.die = layout, die_index, die
        self.rec = layout.tables.dies[die_index]
        self.inbox = layout.to_die[die_index].receiver()
        self.to_front = [c.sender() for c in layout.die_to_front[die_index]]
        self.to_sup = layout.die_to_sup[die_index].sender()
        self.engines = {}
        self.owner = {}  # request id -> slot
        self.threads = threads
        self.repack, self.repack_dir = repack, repack_dir  # PANTHEON_REPACK_DIR (Operations)
        self.assigned = list(slots)
        self._load(slots, threads)

    def _load(self, slots, threads):
        for i in slots:
            rec = self.layout.tables.read_slot(i)
            try:
                self.rec["heartbeat"] = time.monotonic() + LOAD_GRACE_S
                if self.die.kind == "cuda":
                    model, n_ctx = self._open_cuda(rec)
                elif self.die.kind != "cpu":
                    raise UnsupportedDevice(f"die {self.die.name}: no engine runs on {self.die.kind!r} dies")
                else:
                    model = open_model(text(rec["path"]), threads=threads, quantize=bool(rec["quantize"]),
                                       config=text(rec["config"]) or None, repack=self.repack,
                                       repack_dir=self.repack_dir)
                    n_ctx = context_size(int(rec["ctx_cap"]), model.config.n_ctx_train)
                model.config = with_pooling(model.config, rec)  # --pooling: what this slot's engine serves
                cfg = EngineConfig(n_ctx=n_ctx, max_batch=int(rec["batch_slots"]),
                                   max_sessions=int(rec["max_sessions"]))
                if self.die.kind == "cpu":
                    # before the model is announced: its first request must not wait for a compile
                    began = time.monotonic()
                    warm_up(model, n_ctx)
                    model.heartbeat = self._beat
                    # the heartbeat is judged from here on (a cold compile above is not a hang)
                    print(f"pantheon-worker {self.die.name}: slot {i} kernels ready in {time.monotonic() - began:.1f} s",
                          file=sys.stderr, flush=True)
                self.engines[i] = Engine(model, cfg)
                self.rec["loaded"] |= 1 << i  # the die may go up now: the model serves at full speed
            except Exception as e:  # a model that cannot load must not take the die's other models down
                self.engines.pop(i, None)
                self.rec["loaded"] = int(self.rec["loaded"]) & ~(1 << i)
                reason = protocol.encode_slot(i, f"failed: {type(e).__name__}: {e}")
                self.to_sup.send(Kind.SLOT_FAILED, 0, 0, reason, timeout=1.0)  # the why before the bit
                self.rec["failed"] |= 1 << i
        self._beat()

    def _beat(self):
        self.rec["heartbeat"] = time.monotonic()

    def _open_cuda(self, rec):
        """The GPU engine (CUDA is first imported here, in the die's own process); its load log to stderr."""
        from pantheon.engine.cuda.loader import load_report, open_for_die

        model, n_ctx = open_for_die(text(rec["path"]), text(rec["config"]) or None, self.die.name, self.die.index,
                                    text(rec["split"]), lambda train: context_size(int(rec["ctx_cap"]), train),
                                    int(rec["batch_slots"]), int(rec["max_sessions"]))
        for line in load_report(model):
            print(f"pantheon-worker {self.die.name}: {line}", file=sys.stderr, flush=True)
        return model, n_ctx

    def run(self):
        if self.assigned and not self.engines:
            self.to_sup.flush(EXIT_FLUSH_S)  # the supervisor reads why before it sees the exit
            return protocol.EXIT_BAD_MODEL  # every model placed here failed to open: do not crash-loop
        beat = heartbeat_interval()
        next_beat = 0.0
        while True:
            busy = any(e.has_work for e in self.engines.values())
            self._drain(0 if busy else IDLE_WAIT_S)
            for slot, engine in list(self.engines.items()):
                if engine.has_work:
                    self._route(self._step(engine))
            now = time.monotonic()
            if now >= next_beat:
                self.rec["heartbeat"] = now
                next_beat = now + beat

    def _step(self, engine):
        """One engine step; if it raises, its requests end with an error (never resubmitted) and the die
        lives on: a request that breaks the engine must not take the die, or its replicas, with it."""
        try:
            return engine.step()
        except MemoryError:
            raise
        except Exception as e:
            traceback.print_exc()
            return engine.fail_all(f"the engine failed on this request: {type(e).__name__}: {e}")

    def _drain(self, wait):
        msg = self.inbox.receive(timeout=wait)
        while msg is not None:
            self._handle(msg)
            msg = self.inbox.poll()

    def _handle(self, msg):
        if msg.kind == Kind.SUBMIT:
            self._submit(msg)
        elif msg.kind == Kind.CANCEL:
            slot = self.owner.get(msg.request_id)
            if slot is not None:
                self.engines[slot].abort(msg.request_id, _cancelled_choice(msg))
        elif msg.kind == Kind.LOAD_SLOT:
            self._load([protocol.decode_slot(bytes(msg.payload))[0]], self.threads)
        elif msg.kind == Kind.UNLOAD_SLOT:
            self._unload(protocol.decode_slot(bytes(msg.payload))[0])
        elif msg.kind == Kind.FREE_CACHES:
            for engine in self.engines.values():
                engine.drop_cached()  # memory pressure: kept caches no request is using go first

    def _unload(self, slot):
        """Drop a model: whatever still runs on it ends with a clear error, then its memory goes."""
        for rid in [r for r, s in self.owner.items() if s == slot]:
            self._fail(rid, ErrorCode.UNAVAILABLE, "the model was unloaded", 5)
            self._release(rid)
        engine = self.engines.pop(slot, None)
        if engine is not None and hasattr(engine.model, "close"):
            engine.model.close()  # a GPU model hands its device memory back to the driver now
        self.rec["loaded"] = int(self.rec["loaded"]) & ~(1 << slot)
        self.rec["failed"] = int(self.rec["failed"]) & ~(1 << slot)

    def _submit(self, msg):
        """Decode the job (the dispatcher read only its routing header) and hand it to its engine."""
        try:
            job = protocol.decode_job(bytes(msg.payload))
            engine = self.engines.get(job.slot)
            if engine is None:
                raise KeyError(f"model slot {job.slot} is not loaded on this die")
            engine.add(Request(msg.request_id, job.prompt, job.max_tokens, job.params, frozenset(job.stop_ids),
                               session=job.session or None, reasoning_budget=job.reasoning_budget,
                               think_ids=job.think_ids, constraint=_constraint(engine, job), logprobs=job.logprobs,
                               n=job.n, embed=job.embed, prompt_logprobs=job.prompt_logprobs,
                               post_sampling=job.post_sampling, private=job.private))
        except (PantheonError, FrameError, KeyError, ValueError) as e:
            self._fail(msg.request_id, ErrorCode.BAD_REQUEST, str(e))
            return
        self.owner[msg.request_id] = job.slot
        self.rec["in_flight"] += 1

    def _fail(self, rid, code, detail, retry_after=0.0):
        """End request `rid` with an error; the DONE notice tells the dispatcher its place is free."""
        self.to_front[protocol.front_of(rid)].send(Kind.ERROR, rid, 0, protocol.encode_error(code, detail, retry_after),
                                                   timeout=5.0)
        self.to_sup.send(Kind.DONE, rid, 0, protocol.encode_done("abort", 0, 0, 0), timeout=5.0)

    def _route(self, events):
        for ev in events:
            out = self.to_front[protocol.front_of(ev.id)]
            if isinstance(ev, TokenEvent):
                body = protocol.encode_token(ev.token, ev.logprob, ev.choice, ev.cached)
                out.send(Kind.TOKENS, ev.id, ev.index, body, timeout=5.0)
                continue
            if isinstance(ev, EmbeddingEvent):
                for seq, body in protocol.embedding_pieces(ev.vector):
                    out.send(Kind.EMBEDDING, ev.id, seq, body, timeout=5.0)
                continue
            if isinstance(ev, PromptLogprobsEvent):
                out.send(Kind.PROMPT_LOGPROBS, ev.id, ev.start, protocol.encode_prompt_scores(ev.scores), timeout=5.0)
                continue
            if ev.reason == "error":
                self._fail(ev.id, ErrorCode.INTERNAL, ev.message or "the engine failed on this request")
                self._release(ev.id)
                continue
            body = protocol.encode_done(ev.reason, ev.prompt_tokens, ev.cached_tokens, ev.completion_tokens,
                                        ev.choice, ev.final, ev.stop_token)
            out.send(Kind.DONE, ev.id, ev.completion_tokens, body, timeout=5.0)
            if not ev.final:
                continue  # other choices of the request still run: its place on the die is not free yet
            self.to_sup.send(Kind.DONE, ev.id, 0, body, timeout=5.0)
            self._release(ev.id)
            self.rec["completed"] += 1

    def _release(self, rid):
        """Forget a finished request; only one this die counted leaves the in-flight count (no uint wrap)."""
        if self.owner.pop(rid, None) is not None:
            self.rec["in_flight"] -= 1


CHAOS_EXIT = 13


def _log_to_stderr(die_name):
    """The engine's log records (a model's repacking, or why it was skipped) on stderr, as the worker's
    own lines are."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"pantheon-worker {die_name}: %(message)s"))
    engine_log = logging.getLogger("pantheon.engine")
    engine_log.addHandler(handler)
    engine_log.setLevel(logging.INFO)


def worker_main(layout, die_index, die, slots, ops=None):
    """Entry point in the forked child; returns the exit code (see workers.protocol)."""
    os.setpgid(0, 0)
    faulthandler.enable(all_threads=True)  # SIGSEGV, and the supervisor's SIGABRT on a hang, dump stacks
    if ops is not None and ops.chaos_hooks:
        # soak-test faults: SIGUSR1 exits without cleanup, SIGUSR2 hangs the step loop (heartbeat stops)
        signal.signal(signal.SIGUSR1, lambda *_: os._exit(CHAOS_EXIT))
        signal.signal(signal.SIGUSR2, lambda *_: time.sleep(1e9))
    _log_to_stderr(die.name)
    if die.kind == "cpu" and die.cores:
        os.sched_setaffinity(0, die.cores)
    threads = len(die.cores) if die.cores else None
    try:
        ops = ops or Operations()
        worker = DieWorker(layout, die_index, die, slots, threads, ops.repack, ops.repack_dir)
        return worker.run()
    except SystemExit as e:
        return e.code or 0
    except MemoryError:
        return protocol.EXIT_OUT_OF_MEMORY
    except Exception:
        traceback.print_exc()
        return 1


def _cancelled_choice(msg):
    """The choice a CANCEL stops; a body that does not parse stops the whole request (it was cancelled)."""
    try:
        return protocol.decode_cancel(bytes(msg.payload))
    except FrameError:
        return None


def _constraint(engine, job):
    """The grammar of a job as the engine's constraint (built here: masks need the die's logits); a
    resumed stream's already generated tokens are fed to it first."""
    if not job.grammar:
        return None
    from pantheon.text.grammar import Constraint

    constraint = Constraint(engine.model.tokenizer, job.grammar)
    for tok in job.prompt[len(job.prompt) - job.grammar_replay:] if job.grammar_replay else ():
        constraint.accept(tok)
    return constraint
