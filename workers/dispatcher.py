"""The supervisor's dispatcher: forwards each request to the least-busy live replica, queues the surplus."""

import json
import math
import queue
import time
from collections import deque
from dataclasses import dataclass

from ipc.mux import Mux
from pantheon.serve.metrics import Recorder
from pantheon.serve.routing import SessionMap, pick_replica
from workers import protocol
from workers.commands import AdminReply, DieFailed, EmptySlot, FailDie, FailFront, SlotEmptied, ToDie
from workers.protocol import ErrorCode, Kind
from workers.tables import DIE_STALLED, DIE_STARTING, DIE_UP, SLOT_LOADED, text

LIVE_DIES = (DIE_STARTING, DIE_UP, DIE_STALLED)

CRITICAL = 3  # pantheon.serve.memory.PressureLevel.CRITICAL, as stored in the instance record
CRITICAL_RETRY_S = 5


@dataclass
class Pending:
    rid: int
    slot: int
    front: int
    session: int
    body: bytes
    die: int = -1
    started: float = 0.0
    prefix: int = 0  # hash of the prompt's leading blocks: where they were last run, they are cached
    n: int = 1  # choices: the places the request takes among a die's --max-concurrent

    @property
    def affinity(self):
        """The key of the replica this request should follow: its session's, else its prompt prefix's."""
        if self.session:
            return self.slot, "session", self.session
        return (self.slot, "prefix", self.prefix) if self.prefix else None


class Dispatcher:
    """Owns the front->supervisor and die->supervisor rings; one thread runs `run_once` in a loop."""

    def __init__(self, layout, queue_factor=1.0, wake_main=lambda: None):
        self.layout, self.tables = layout, layout.tables
        self.gauges = Recorder(layout.metrics, layout.metrics_rows, row=layout.n_fronts)
        self._gauges_at = 0.0
        self.queue_factor = queue_factor
        self.from_fronts = [c.receiver() for c in layout.to_sup]
        self.from_dies = [c.receiver() for c in layout.die_to_sup]
        self.mux = Mux(self.from_fronts + self.from_dies)
        self.to_front = [c.sender() for c in layout.from_sup]
        self.to_die = [c.sender() for c in layout.to_die]
        self.load = {}  # (die, slot) -> sequences in flight there (a request of n choices counts n)
        self.running = {}  # rid -> Pending (on a die)
        self.queued = {}  # slot -> deque of Pending
        self.sessions = SessionMap()  # sessions' and prompt prefixes' replicas
        self.service_s = {}  # slot -> moving mean of request service time
        self.status_notes = deque(maxlen=64)  # (die, slot, text) from workers, for the supervisor
        self.commands = queue.SimpleQueue()  # workers.commands messages from the supervisor's main thread
        self.to_main = queue.SimpleQueue()  # SlotEmptied / DieFailed answers for the main thread
        self.admin_inbox = queue.SimpleQueue()  # (front, rid, kind, body) for the main thread
        self.wake_main = wake_main  # rings the main thread's Wakeup when something waits for it

    def run_once(self, timeout=0.05):
        while not self.commands.empty():
            self._command(self.commands.get())
        got = self.mux.receive(timeout)
        while got is not None:
            index, msg = got
            if index < len(self.from_fronts):
                self._from_front(index, msg)
            else:
                self._from_die(index - len(self.from_fronts), msg)
            got = self.mux.poll()
        if time.monotonic() - self._gauges_at > 0.1:
            self._publish_gauges()

    def _publish_gauges(self):
        """Queue depth per model and requests in flight per die, for /metrics in every front."""
        self._gauges_at = time.monotonic()
        for slot, rec in self.tables.live_slots():
            self.gauges.queue_depth(text(rec["name"]), len(self.queued.get(slot, ())))
        for d in range(self.layout.n_dies):
            self.gauges.in_flight(self.layout.metrics.dies[d], self.in_flight(d))
        for slot in range(len(self.tables.slot_in_flight)):
            self.tables.slot_in_flight[slot] = self.slot_in_flight(slot)

    def _from_front(self, front, msg):
        if msg.kind == Kind.SUBMIT:
            self._submit(front, msg)
        elif msg.kind == Kind.CANCEL:
            self._cancel(msg.request_id, bytes(msg.payload))
        elif msg.kind in (Kind.ADMIN_LOAD, Kind.ADMIN_UNLOAD):
            self.admin_inbox.put((front, msg.request_id, msg.kind, bytes(msg.payload)))
            self.wake_main()

    def _command(self, cmd):
        """One typed message from the main thread (workers.commands)."""
        if isinstance(cmd, FailDie):
            self.fail_die(cmd.die, cmd.detail)
            if cmd.final:
                self._answer(DieFailed(cmd.die, cmd.detail, tuple(self.status_notes)))
        elif isinstance(cmd, FailFront):
            self.fail_front(cmd.front)
        elif isinstance(cmd, AdminReply):
            self.reply(cmd.front, cmd.rid, cmd.status, cmd.body)
        elif isinstance(cmd, ToDie):
            self.send_to_die(cmd.die, cmd.kind, cmd.payload)
        elif isinstance(cmd, EmptySlot):
            self._answer(SlotEmptied(cmd.slot, self.unload_slot(cmd.slot, cmd.dies)))
        else:
            raise TypeError(f"unknown command {cmd!r}")

    def _answer(self, msg):
        self.to_main.put(msg)
        self.wake_main()

    def _from_die(self, die, msg):
        if msg.kind == Kind.DONE:
            self._done(msg.request_id)
        elif msg.kind == Kind.SLOT_FAILED:
            self.status_notes.append((die, *protocol.decode_slot(bytes(msg.payload))))

    def replicas(self, slot):
        """Dies that are up and have `slot` loaded."""
        dies = self.tables.dies
        return [d for d in range(self.layout.n_dies)
                if dies[d]["state"] == DIE_UP and int(dies[d]["loaded"]) >> slot & 1]

    def _submit(self, front, msg):
        """Route on the job's fixed header alone; the die decodes (and refuses) the rest."""
        body = bytes(msg.payload)
        try:
            route = protocol.read_route(body)
        except Exception as e:
            return self._error(front, msg.request_id, ErrorCode.BAD_REQUEST, f"malformed request: {e}")
        p = Pending(msg.request_id, route.slot, front, route.session, body, prefix=route.prefix, n=route.n)
        if self.tables.instance[0]["pressure"] >= CRITICAL:
            return self._error(front, p.rid, ErrorCode.UNAVAILABLE, "memory pressure is CRITICAL", CRITICAL_RETRY_S)
        if p.slot >= len(self.tables.slots) or self.tables.read_slot(p.slot)["state"] != SLOT_LOADED \
                or not self.replicas(p.slot):
            return self._error(front, p.rid, ErrorCode.UNAVAILABLE, "no live replica of this model", 1)
        if not 1 <= p.n <= self._max_concurrent(p.slot):
            return self._error(front, p.rid, ErrorCode.BAD_REQUEST, f"{p.n} choices exceed the model's "
                               f"{self._max_concurrent(p.slot)} places per replica (--max-concurrent)")
        if self._sessions_full(p):
            return self._error(front, p.rid, ErrorCode.OVERLOADED, "every session of this model is active (--max-sessions)",
                               self.retry_after(p.slot))
        if self._try_start(p):
            return self._ack(front, p.rid, p.die)
        queue = self.queued.setdefault(p.slot, deque())
        if len(queue) >= self._queue_cap(p.slot):
            return self._error(front, p.rid, ErrorCode.OVERLOADED, "all replicas are busy and the queue is full",
                               self.retry_after(p.slot))
        queue.append(p)
        self._ack(front, p.rid, protocol.QUEUED)

    def _sessions_full(self, p):
        """A request of a new session while --max-sessions sessions (per live replica) are running or
        queued is refused, not allowed to evict an active session's cache."""
        if not p.session:
            return False
        waiting = self.queued.get(p.slot, ())
        active = {q.session for q in (*self.running.values(), *waiting) if q.slot == p.slot and q.session}
        cap = max(1, int(self.tables.read_slot(p.slot)["max_sessions"])) * max(1, len(self.replicas(p.slot)))
        return p.session not in active and len(active) >= cap

    def _max_concurrent(self, slot):
        return max(1, int(self.tables.read_slot(slot)["max_concurrent"]))

    def _queue_cap(self, slot):
        return max(1, math.ceil(self.queue_factor * self._max_concurrent(slot) * len(self.replicas(slot))))

    def retry_after(self, slot):
        """Seconds until a queue place is likely free: queue depth x mean service time / parallel slots."""
        parallel = self._max_concurrent(slot) * max(1, len(self.replicas(slot)))
        depth = len(self.queued.get(slot, ())) + 1
        return max(1, math.ceil(depth * self.service_s.get(slot, 1.0) / parallel))

    def _try_start(self, p):
        cap = self._max_concurrent(p.slot)
        live = [d for d in self.replicas(p.slot) if self.load.get((d, p.slot), 0) + p.n <= cap]
        if not live:
            return False
        load = {d: self.load.get((d, p.slot), 0) for d in live}
        key = p.affinity
        die = pick_replica(live, load, self.sessions.get(key) if key else None)
        if key:
            self.sessions.put(key, die)
        p.die, p.started = die, time.monotonic()
        self.load[(die, p.slot)] = load[die] + p.n
        self.running[p.rid] = p
        self.to_die[die].send(Kind.SUBMIT, p.rid, 0, p.body, timeout=5.0)
        return True

    def _cancel(self, rid, body=b""):
        """Forward a cancel to the die running `rid`; a queued request leaves the queue when the whole of
        it is cancelled (a cancel of one choice waits for the request to run: the front drops its tokens)."""
        p = self.running.get(rid)
        if p is not None:
            self.to_die[p.die].send(Kind.CANCEL, rid, 0, body, timeout=5.0)
            return
        if body:
            return
        for waiting in self.queued.values():
            for q in list(waiting):
                if q.rid == rid:
                    waiting.remove(q)
                    self._error(q.front, rid, ErrorCode.CANCELLED, "cancelled while queued")

    def _done(self, rid):
        p = self.running.pop(rid, None)
        if p is None:
            return
        self.load[(p.die, p.slot)] -= p.n
        took = time.monotonic() - p.started
        self.service_s[p.slot] = 0.8 * self.service_s.get(p.slot, took) + 0.2 * took
        queue = self.queued.get(p.slot)
        while queue and self._try_start(queue[0]):
            queue.popleft()

    def _ack(self, front, rid, die):
        """Accepted: started on `die`, or QUEUED until a replica frees a place."""
        self.to_front[front].send(Kind.ACCEPTED, rid, 0, protocol.encode_accepted(die), timeout=5.0)

    def _error(self, front, rid, code, detail, retry_after=0.0):
        self.to_front[front].send(Kind.ERROR, rid, 0, protocol.encode_error(code, detail, retry_after), timeout=5.0)

    def fail_die(self, die, detail):
        """Die `die` is gone: end its requests with WORKER_DIED, drop what it had not read, forget its caches."""
        msg = self.from_dies[die].poll()
        while msg is not None:  # its last words first: DONE notices of finished requests, load errors
            self._from_die(die, msg)
            msg = self.from_dies[die].poll()
        for rid, p in list(self.running.items()):
            if p.die == die:
                del self.running[rid]
                self._error(p.front, rid, ErrorCode.WORKER_DIED, detail)
        for key in [k for k in self.load if k[0] == die]:
            self.load[key] = 0
        self.layout.to_die[die].bump_generation()
        self.to_die[die] = self.layout.to_die[die].sender()
        self.sessions.forget_die(die)

    def fail_front(self, front):
        """Front `front` is gone: nobody reads its streams, so stop generating them."""
        for rid, p in list(self.running.items()):
            if p.front == front:
                self.to_die[p.die].send(Kind.CANCEL, rid, 0, timeout=5.0)
        for queue_ in self.queued.values():
            for q in [q for q in queue_ if q.front == front]:
                queue_.remove(q)
        self.to_front[front] = self.layout.from_sup[front].sender()

    def reply(self, front, rid, status, body):
        """The admin desk's answer to an admin request: its HTTP status and JSON body."""
        payload = json.dumps({"status": status, "body": body}).encode()
        self.to_front[front].send(Kind.ADMIN_REPLY, rid, 0, payload, timeout=5.0)

    def slot_in_flight(self, slot):
        return sum(n for (_, s), n in self.load.items() if s == slot) + len(self.queued.get(slot, ()))

    def send_to_die(self, die, kind, payload=b""):
        self.to_die[die].send(kind, 0, 0, payload, timeout=5.0)

    def unload_slot(self, slot, dies):
        """Tell the slot's dies to drop it (they end what still runs with an error); returns that count."""
        aborted = sum(1 for p in self.running.values() if p.slot == slot) + len(self.queued.get(slot, ()))
        for q in self.queued.pop(slot, ()):
            self._error(q.front, q.rid, ErrorCode.UNAVAILABLE, "the model was unloaded", 5)
        for d in dies:
            # a die without a live worker (failed, or down awaiting restart) must not find this UNLOAD
            # in its ring later: its next worker would drop whatever model then holds the slot number
            if self.tables.dies[d]["state"] in LIVE_DIES:
                self.send_to_die(d, Kind.UNLOAD_SLOT, protocol.encode_slot(slot))
        return aborted

    def in_flight(self, die):
        return sum(n for (d, _), n in self.load.items() if d == die)

    def queue_depth(self):
        return sum(len(q) for q in self.queued.values())
