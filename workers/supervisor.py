"""The supervisor: binds the socket, creates every ring, forks fronts and die workers, reaps, restarts, stops."""

import collections
import os
import signal
import socket
import sys
import threading
import time
import traceback

from ipc import reap_orphans
from pantheon.errors import UsageError
from pantheon.serve.dies import die_memory
from pantheon.serve.response_store import make_store
from workers import protocol, response_dir
from workers.admin_desk import AdminDesk
from workers.admission import Admission
from workers.commands import FailDie, FailFront, SlotEmptied, ToDie
from workers.descriptors import fit_open_files
from workers.dispatcher import Dispatcher
from workers.front import front_main  # preloaded: a forked front serves at once, its pages shared
from workers.layout import Layout
from workers.lifecycle import adopt_parent_death, reset_signals
from workers.pressure import PressureWatch
from workers.protocol import Kind
from workers.restarts import RestartPolicy
from workers.slots import SlotBook
from workers.tables import DIE_DEGRADED, DIE_DOWN, DIE_FAILED, DIE_STALLED, DIE_STARTING, DIE_UP, SLOT_LOADED, SLOT_LOADING
from workers.vram import Reclaim
from workers.wakeup import Wakeup

GRACE_S = 12.0  # the fronts' drain (workers/front.py DRAIN_S) plus time to flush and exit
TICK_S = 0.05  # the main loop's longest sleep: restarts, hang checks and pressure are polled this often
QUEUED_SIGNALS = 5
ABORT_GRACE_S = 2.0  # after SIGABRT, a hung worker gets this long to dump its stack before SIGKILL


def log(msg):
    print(f"pantheon-serve: {msg}", file=sys.stderr, flush=True)


def bind_listener(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """The main thread reaps and restarts; one dispatcher thread routes requests (stopped around forks)."""

    def __init__(self, config, dies, nvml=None):
        self.config = config
        self.die_list = sorted(dies.values(), key=lambda d: (d.kind, d.index))
        self.pid = os.getpid()
        self.book = SlotBook(config, self.die_list)
        ops = config.ops
        self.restarts = {d: RestartPolicy(ops.restart_intensity, ops.restart_period) for d in range(len(self.die_list))}
        self.fronts, self.workers = {}, {}  # pid -> index
        self.sig_queue = collections.deque()  # signals as the handler queued them, handled by the main loop
        self.wakeup = Wakeup()
        self.stopping = None
        self._thread, self._stop = None, threading.Event()
        self.admin_queue = collections.deque()
        self.aborted = {}  # die -> when a hung worker was sent SIGABRT
        self.started = {}  # die -> when its current worker was forked
        self.nvml = nvml
        self.reclaims = {}
        self.store_path = None  # the fronts' shared Responses store (None: --responses-store 0)

    @property
    def port(self):
        return self.sock.getsockname()[1]

    def start(self):
        fit_open_files(self.config.http.connection_limit)
        reap_orphans()
        self.layout = Layout.create(self.config.http_workers, len(self.die_list),
                                    [s["name"] for s in self.book.slots], [d.name for d in self.die_list],
                                    self.die_list)
        self.book.publish(self.layout.tables)
        self._baseline_vram()
        self.pressure = PressureWatch(self.config.ops, self.die_list, self.nvml)
        self.pressure.poll(self.layout.tables.instance[0])
        self.admission = Admission(self.pressure, self.die_list, self.config.quantize, self.layout.tables, self.nvml)
        self.admission.check_startup(len(self.book.slots))
        self.sock = bind_listener(self.config.host, self.config.port)
        self.dispatcher = Dispatcher(self.layout, wake_main=self.wakeup.ring)
        self.desk = AdminDesk(self.config, self.die_list, self.layout.tables, self.book, self.dispatcher.commands.put,
                              self.admission.verdict, self.load_slot, self.dispatcher.slot_in_flight)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        if self.config.responses_store_mb:
            self.store_path = response_dir.make(self.pid)
            make_store(self.store_path)
        for f in range(self.config.http_workers):
            self._spawn_front(f)
        for d in self.book.used_dies():
            self.spawn_worker(d)
        self._start_thread()

    def _start_thread(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._dispatch_loop, name="dispatcher", daemon=True)
        self._thread.start()

    def _dispatch_loop(self):
        while not self._stop.is_set():
            try:
                self.dispatcher.run_once(0.02)
            except Exception:
                traceback.print_exc()

    def _fork(self, role, *args):
        """Fork with no other thread alive, so the child inherits no half-held lock."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        pid = os.fork()
        if pid == 0:
            self._child(role, args)
        if self._thread is not None:
            self._start_thread()
        return pid

    def _child(self, role, args):
        code = 1
        try:
            reset_signals()
            adopt_parent_death(self.pid)
            code = role(*args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code or 0)

    def _spawn_front(self, f):
        self.fronts[self._fork(front_main, self.layout, f, self.sock, self.config, self.store_path)] = f

    def spawn_worker(self, d):
        rec = self.layout.tables.dies[d]
        rec["loaded"] = rec["failed"] = rec["in_flight"] = 0
        rec["heartbeat"] = 0.0
        rec["state"] = DIE_STARTING
        rec["generation"] += 1
        self.started[d] = time.monotonic()
        pid = self._fork(_worker_role, self.layout, d, self.die_list[d], self.book.slots_on(d), self.config.ops)
        rec["pid"] = pid
        self.workers[pid] = d

    def _on_signal(self, sig, frame):
        """Only queue it (at most QUEUED_SIGNALS) and wake the main loop, as gunicorn's arbiter does."""
        if len(self.sig_queue) < QUEUED_SIGNALS:
            self.sig_queue.append(sig)
        self.wakeup.ring()

    def load_slot(self, slot):
        """A new model slot: live workers of its dies load it; a die without a worker gets one."""
        for d in self.book.dies_of(slot):
            if d in self.workers.values():
                self.dispatcher.commands.put(ToDie(d, Kind.LOAD_SLOT, protocol.encode_slot(slot)))
            else:
                self.spawn_worker(d)

    def close(self):
        """What outlives the children on disk: the Responses store's directory."""
        if self.store_path is not None:
            response_dir.remove(self.store_path)

    def run(self):
        """Serve until SIGTERM/SIGINT has drained everything; returns the exit status."""
        log(f"listening on http://{self.config.host}:{self.port}")
        while True:
            self.wakeup.sleep(TICK_S)
            self._handle_signals()
            self._reap()
            if self.stopping is not None and self._stopped():
                return 0
            self._watch()

    def _handle_signals(self):
        while self.sig_queue:
            sig = self.sig_queue.popleft()
            if sig in (signal.SIGTERM, signal.SIGINT):
                self._begin_stop(immediate=self.stopping is not None and sig == signal.SIGINT)

    def _begin_stop(self, immediate):
        if immediate:
            log("second interrupt: stopping now")
            self._kill_all(signal.SIGKILL)
            os._exit(0)
        log("stopping: draining streams")
        self.stopping = time.monotonic() + GRACE_S
        self.sock.close()
        for pid in self.fronts:
            _signal(pid, signal.SIGTERM)

    def _stopped(self):
        if self.fronts and time.monotonic() < self.stopping:
            return False
        self._kill_all(signal.SIGKILL)
        self._stop.set()
        return not self.fronts and not self.workers

    def _kill_all(self, sig):
        for pid in list(self.fronts) + list(self.workers):
            _signal(pid, sig)

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._exited(pid, os.waitstatus_to_exitcode(status))

    def _exited(self, pid, code):
        if pid in self.fronts:
            f = self.fronts.pop(pid)
            if self.stopping is None:
                log(f"front {f} (pid {pid}) exited with {code}; respawning")
                self.dispatcher.commands.put(FailFront(f))
                self._spawn_front(f)
        elif pid in self.workers:
            self._worker_exited(self.workers.pop(pid), pid, code)

    def _worker_exited(self, d, pid, code):
        self.aborted.pop(d, None)
        if d in self.reclaims:
            self.reclaims[d].begin()
        rec = self.layout.tables.dies[d]
        rec["state"], rec["loaded"], rec["in_flight"], rec["pid"] = DIE_DOWN, 0, 0, 0
        detail = f"worker of die {self.die_list[d].name} (pid {pid}) exited with {code}"
        final = self.stopping is None and (code == protocol.EXIT_BAD_MODEL or not self.restarts[d].allow())
        self.dispatcher.commands.put(FailDie(d, detail, final))  # final: the die's last notes come back
        if self.stopping is not None:
            return
        log(detail)
        if final:
            rec["state"] = DIE_FAILED
            return
        rec["restarts"] += 1
        self.restarts[d].schedule(time.monotonic())

    def _watch(self):
        now = time.monotonic()
        tables = self.layout.tables
        self._restart_due(now)
        self._check_hangs(now)
        changed = self.pressure.poll(tables.instance[0])
        if changed:
            log(f"memory pressure {changed[0].name} -> {changed[1].name}")
            if self.pressure.frees_caches(changed[1]) and not self.pressure.frees_caches(changed[0]):
                for d in list(self.workers.values()):
                    self.dispatcher.commands.put(ToDie(d, Kind.FREE_CACHES))
        for d in self.workers.values():
            rec = tables.dies[d]
            if rec["state"] == DIE_STARTING and self.book.settled(rec, d):
                rec["state"] = DIE_UP
        notes = tuple(self.dispatcher.status_notes)  # one copy, taken at once: the dispatcher thread appends
        for name, state in self.book.refresh(tables, notes):
            if state == SLOT_LOADED:  # a worker announces a model only once its kernels are compiled
                log(f"model {name} loaded")
        self._admin()

    def _restart_due(self, now):
        """Start the replacement of every die whose backoff has passed and whose memory is back."""
        for d, policy in self.restarts.items():
            if policy.due(now) and d not in self.workers.values() and self._memory_back(d):
                policy.clear()
                self.spawn_worker(d)

    def _check_hangs(self, now):
        """A live worker whose heartbeat is stale is hung: SIGABRT (faulthandler dumps its stack), then SIGKILL."""
        for pid, d in list(self.workers.items()):
            rec = self.layout.tables.dies[d]
            if rec["state"] == DIE_STARTING and now - self.started.get(d, now) > self.config.ops.boot_timeout:
                log(f"die {self.die_list[d].name} (pid {pid}) still loading after {self.config.ops.boot_timeout:.0f} s: "
                    "SIGKILL")
                _signal(pid, signal.SIGKILL)
                continue
            if rec["state"] not in (DIE_UP, DIE_STALLED) or now - rec["heartbeat"] <= self.config.ops.hang_timeout:
                continue
            if d not in self.aborted:
                log(f"die {self.die_list[d].name} (pid {pid}) missed its heartbeat for "
                    f"{now - rec['heartbeat']:.1f} s: stalled, SIGABRT")
                rec["state"] = DIE_STALLED  # no new requests; /health says so until it is replaced
                self.aborted[d] = now
                _signal(pid, signal.SIGABRT)
            elif now - self.aborted[d] > ABORT_GRACE_S:
                _signal(pid, signal.SIGKILL)

    def _memory_back(self, d):
        """GPU dies restart only once NVML shows the dead worker's memory returned (bounded, then DEGRADED)."""
        reclaim = self.reclaims.get(d)
        state = "ready" if reclaim is None else reclaim.state()
        rec = self.layout.tables.dies[d]
        if state == "degraded" and rec["state"] != DIE_DEGRADED:
            log(f"die {self.die_list[d].name}: memory not reclaimed after {reclaim.wait_s:.0f} s: DEGRADED")
            rec["state"] = DIE_DEGRADED
        return state == "ready"

    def _baseline_vram(self):
        """Record each GPU die's memory use while no worker runs on it (before the first fork)."""
        cuda = {d.name: d for d in self.die_list if d.kind == "cuda"}
        if not cuda:
            return
        for i, die in enumerate(self.die_list):
            mem = die_memory(cuda, self.nvml).get(die.name)
            if mem is not None:
                read = (lambda name: lambda: getattr(die_memory({name: cuda[name]}, self.nvml)[name], "used", None))
                self.reclaims[i] = Reclaim(read(die.name), mem.used)

    def _admin(self):
        """Answers from the dispatcher, then admin requests; a load waits while another is loading."""
        while not self.dispatcher.to_main.empty():
            msg = self.dispatcher.to_main.get()
            if isinstance(msg, SlotEmptied):
                self.desk.emptied(msg)
            else:
                self.book.die_failed(self.layout.tables, msg.die, msg.detail, msg.notes)
        while not self.dispatcher.admin_inbox.empty():
            self.admin_queue.append(self.dispatcher.admin_inbox.get())
        while self.admin_queue:
            kind = self.admin_queue[0][2]
            if kind == Kind.ADMIN_LOAD and any(rec["state"] == SLOT_LOADING for _, rec in self.layout.tables.live_slots()):
                break
            self.desk.take(*self.admin_queue.popleft())
        self.desk.tick()




def _worker_role(layout, d, die, slots, ops):
    """In the forked die worker: numba's kernel cache is placed, then the engine loads (never in the
    supervisor)."""
    from pantheon.engine.kernels.compile_cache import configure

    configure(ops.kernel_cache)  # before any kernel module is imported (it fixes numba's cache dir)
    from workers.worker import worker_main

    return worker_main(layout, d, die, slots, ops)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
