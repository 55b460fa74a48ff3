"""Stored Responses (OpenAI's store: true): one SQLite file every HTTP front shares, under a byte bound."""

import json
import os
import sqlite3
import threading
import time

import psutil

from pantheon.errors import PantheonError

# owner: the pid of the front generating a background response while it is pending (NULL once settled)
TABLE = """CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, previous TEXT, body TEXT NOT NULL, items TEXT NOT NULL,
    bytes INTEGER NOT NULL, used INTEGER NOT NULL, owner INTEGER)"""
# a streamed background response's SSE events by sequence number (gone with their response: foreign_keys on)
EVENTS = """CREATE TABLE IF NOT EXISTS events (
    id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE, seq INTEGER NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (id, seq))"""
PENDING = ("queued", "in_progress")  # a background response's statuses before it settles
BUSY_S = 30.0  # how long a front waits for another front's write before the store counts as unavailable
EVICT_BATCH = 64  # least recently used rows read per eviction query
SHOWN_ID = 100  # characters of an unknown id an error message repeats (a client may send megabytes)


class StoreUnavailable(PantheonError):
    """The store's file could not be read or written (disk full, removed, locked past BUSY_S)."""


class MissingResponse(PantheonError):
    """A response id the store does not hold: never stored, deleted, or evicted under the byte bound."""

    def __init__(self, response_id):
        shown = repr(response_id[:SHOWN_ID]) + ("..." if len(response_id) > SHOWN_ID else "")
        super().__init__(f"response {shown} is not stored (never stored, stored with store false, deleted, or "
                         "evicted under the store's byte bound)")
        self.response_id = response_id


class ResponseStore:
    """Responses by id with their input items and the id they continue; at most `limit` bytes of JSON, the least
    recently used (stored, read, or continued) evicted first. SQLite serialises the fronts' writes and lets their
    reads run beside them (WAL); within a process the threads share one connection (opened lazily, after the
    fork) under a lock: a front's thirty-odd threads would otherwise hold ninety-odd descriptors beside its
    client sockets, and every operation is a few primary-key statements."""

    def __init__(self, path, limit):
        self.path, self.limit = str(path), limit
        self._lock = threading.RLock()
        self._conn, self._pid = None, None

    def put(self, response_id, previous, body, items, owner=None):
        """Store one response; False (nothing stored) when it alone is larger than the bound. `owner`: the pid
        generating a pending background response (its status queued or in_progress)."""
        body_json, items_json = json.dumps(body), json.dumps(items)
        size = len(body_json) + len(items_json)
        if size > self.limit:
            return False
        with self._lock, self._write() as db:
            db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (response_id, previous, body_json, items_json, size, time.time_ns(), owner))
            self._evict(db)
        return True

    def get(self, response_id):
        """The stored response object (a dict), now counted as used; MissingResponse if it is not held. A pending
        background response whose owner died reads as failed."""
        with self._lock:
            owner, body = self._pending(response_id)
            found = json.loads(body)
            self._touch([response_id])
        if owner is not None and not psutil.pid_exists(owner):
            found.update(status="failed", error={"code": "server_error", "message": "the process generating this "
                                                 "background response ended before it finished"})
        return found

    def pending(self, response_id):
        """Whether a background response is still waiting for its answer (False once settled, cancelled, deleted
        or evicted)."""
        with self._lock:
            try:
                return self._pending(response_id)[0] is not None
            except MissingResponse:
                return False

    def settle(self, response_id, body, events=()):
        """A pending background response's final object (and its stream's last `events`, see append); False
        (nothing written) if it is no longer pending."""
        body_json = json.dumps(body)
        with self._lock, self._write() as db:
            row = db.execute("SELECT owner, items FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None or row[0] is None:
                return False
            db.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?)", [(response_id, *e) for e in events])
            streamed = db.execute("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM events WHERE id = ?",
                                  (response_id,)).fetchone()[0]
            db.execute("UPDATE responses SET body = ?, bytes = ?, used = ?, owner = NULL WHERE id = ?",
                       (body_json, len(body_json) + len(row[1]) + streamed, time.time_ns(), response_id))
            self._evict(db)
        return True

    def append(self, response_id, events):
        """A pending background stream's next events, [(sequence_number, SSE bytes)], counted in its bytes; False
        (nothing written) if it is no longer pending (cancelled, deleted or evicted)."""
        with self._lock, self._write() as db:
            row = db.execute("SELECT owner FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None or row[0] is None:
                return False
            db.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?)", [(response_id, *e) for e in events])
            db.execute("UPDATE responses SET bytes = bytes + ? WHERE id = ?", (sum(len(e[1]) for e in events),
                                                                              response_id))
            self._evict(db)
        return True

    def events(self, response_id, after):
        """(its state: "pending", "settled" or "orphaned" (its generating process died), the stored stream events
        after sequence number `after` as [(n, bytes)]). The state is read first: once it is not pending, every
        event had been written. MissingResponse if it is not held."""
        with self._lock:
            owner, _ = self._pending(response_id)
            try:
                rows = self._db().execute("SELECT seq, body FROM events WHERE id = ? AND seq > ? ORDER BY seq",
                                          (response_id, after)).fetchall()
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"the response store {self.path} cannot be read: {exc}") from None
        if owner is None:
            return "settled", rows
        return ("pending" if psutil.pid_exists(owner) else "orphaned"), rows

    def streamed(self, response_id):
        """Whether the response was made as a streamed background response (it has stored events). MissingResponse
        if it is not held."""
        with self._lock:
            self._pending(response_id)
            try:
                return self._db().execute("SELECT EXISTS (SELECT 1 FROM events WHERE id = ?)",
                                          (response_id,)).fetchone()[0] == 1
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"the response store {self.path} cannot be read: {exc}") from None

    def begin(self, response_id):
        """A queued background response's generation has begun: its status becomes in_progress. Whether it is
        still pending (nothing is written over one settled or cancelled meanwhile)."""
        with self._lock, self._write() as db:
            row = db.execute("SELECT owner, body FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None or row[0] is None:
                return False
            body = json.loads(row[1])
            if body["status"] == "queued":
                body["status"] = "in_progress"
                body_json = json.dumps(body)
                db.execute("UPDATE responses SET body = ?, bytes = bytes + ? WHERE id = ?",
                           (body_json, len(body_json) - len(row[1]), response_id))
        return True

    def cancel(self, response_id):
        """Cancel a pending background response (its status becomes cancelled; its generator stops when it next
        looks); the response object as it now stands. MissingResponse if it is not held."""
        with self._lock, self._write() as db:
            row = db.execute("SELECT owner, body FROM responses WHERE id = ?", (_key(response_id),)).fetchone()
            if row is None:
                raise MissingResponse(response_id)
            body = json.loads(row[1])
            if row[0] is not None:
                body["status"] = "cancelled"
                db.execute("UPDATE responses SET body = ?, owner = NULL WHERE id = ?", (json.dumps(body), response_id))
        return body

    def input_items(self, response_id):
        """The input items the response was made from (without those of the responses it continues)."""
        with self._lock:
            return json.loads(self._row(response_id)[2])

    def conversation(self, response_id):
        """Every item of the chain that ends with `response_id`, oldest first: each response's input items, then
        its output items. The whole chain counts as used; MissingResponse names the first link not held."""
        links, ids, cursor = [], [], response_id
        with self._lock:
            while cursor is not None:
                previous, body, items = self._row(cursor)
                links.append((json.loads(items), json.loads(body)["output"]))
                ids.append(cursor)
                cursor = previous
            self._touch(ids)
        return [item for items, output in reversed(links) for item in items + output]

    def delete(self, response_id):
        """Remove one response (those continuing it keep their rows, and break at this link)."""
        with self._lock, self._write() as db:
            gone = db.execute("DELETE FROM responses WHERE id = ?", (_key(response_id),)).rowcount
        if not gone:
            raise MissingResponse(response_id)

    def _pending(self, response_id):
        try:
            row = self._db().execute("SELECT owner, body FROM responses WHERE id = ?", (_key(response_id),)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the response store {self.path} cannot be read: {exc}") from None
        if row is None:
            raise MissingResponse(response_id)
        return row

    def _row(self, response_id):
        try:
            row = self._db().execute("SELECT previous, body, items FROM responses WHERE id = ?",
                                     (_key(response_id),)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the response store {self.path} cannot be read: {exc}") from None
        if row is None:
            raise MissingResponse(response_id)
        return row

    def _touch(self, ids):
        """Mark a chain (newest first) used, so a live conversation keeps its oldest turns; among its links the
        oldest still goes first."""
        now = time.time_ns()
        with self._write() as db:
            db.executemany("UPDATE responses SET used = ? WHERE id = ?", [(now - i, id_) for i, id_ in enumerate(ids)])

    def _evict(self, db):
        total = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM responses").fetchone()[0]
        while total > self.limit:
            for id_, size in db.execute("SELECT id, bytes FROM responses ORDER BY used LIMIT ?",
                                        (EVICT_BATCH,)).fetchall():
                if total <= self.limit:
                    break
                db.execute("DELETE FROM responses WHERE id = ?", (id_,))
                total -= size

    def _write(self):
        return _Transaction(self)

    def _db(self):
        """This process's connection (the caller holds the lock); a connection never crosses a fork."""
        if self._pid != os.getpid():
            self._conn, self._pid = open_store(self.path), os.getpid()
        return self._conn


def open_store(path):
    """A connection to the store at `path`, made WAL with its tables (created if need be).

    Switching a file to WAL takes it whole, and SQLite does not wait for that (the busy timeout does not
    apply): two processes opening a new store at once see "database is locked". So the first open retries
    until BUSY_S, and a serving tree makes the file once (make_store) before its fronts fork.
    """
    deadline = time.monotonic() + BUSY_S
    while True:
        try:
            conn = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")  # a cache of answers: a host crash may lose it
            conn.execute("PRAGMA foreign_keys=ON")  # a response's events go with it
            conn.execute(TABLE)
            conn.execute(EVENTS)
            return conn
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise StoreUnavailable(f"the response store {path} cannot be opened: {exc}") from None
            time.sleep(0.01)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the response store {path} cannot be opened: {exc}") from None


def make_store(path):
    """Create the store's file (WAL, its table) before the processes that share it start."""
    open_store(path).close()


def _key(response_id):
    """The id as SQLite can bind it; one that is not UTF-8 text (a lone surrogate a JSON escape made) is no id
    this store ever gave out."""
    try:
        response_id.encode("utf-8")
    except UnicodeEncodeError:
        raise MissingResponse(response_id) from None
    return response_id


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an error); sqlite3's errors become StoreUnavailable."""

    def __init__(self, store):
        self.store = store

    def __enter__(self):
        self.db = self.store._db()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the response store {self.store.path} cannot be written: {exc}") from None
        return self.db

    def __exit__(self, kind, exc, tb):
        try:
            self.db.execute("ROLLBACK" if kind else "COMMIT")
        except sqlite3.Error as error:
            if kind is None:
                raise StoreUnavailable(f"the response store {self.store.path} cannot be written: {error}") from None
        if isinstance(exc, sqlite3.Error):
            raise StoreUnavailable(f"the response store {self.store.path} cannot be written: {exc}") from None
        return False

