"""Shared-memory ring vs multiprocessing.Queue vs a pipe: one-way latency and throughput.

Run from the repository root: `python benchmarks/bench_ipc.py [--quick]`. The last line printed
is one JSON object (p50_us, p99_us, small_msgs_per_s, mpqueue_small_msgs_per_s, ...).
"""

import argparse
import json
import multiprocessing
import os
import resource
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ipc import Channel  # noqa: E402
from workers.protocol import Kind  # noqa: E402

SMALL = 64
BIG = 64 << 10
STAMP = struct.Struct("<Q")


class RingTransport:
    name = "ring"

    def __init__(self, doorbell="eventfd"):
        self.ch = Channel(nslots=1024, slot_size=4096, doorbell=doorbell, max_message=1 << 20)
        self.name = f"ring[{doorbell}]"

    def producer(self):
        s = self.ch.sender()
        return lambda data: s.send(Kind.TOKENS, 1, 0, data, timeout=10.0)

    def consumer(self):
        r = self.ch.receiver()
        return lambda: r.receive(timeout=10.0).payload


class QueueTransport:
    name = "mp.Queue"

    def __init__(self):
        self.q = multiprocessing.get_context("fork").Queue()

    def producer(self):
        return self.q.put

    def consumer(self):
        return lambda: self.q.get(timeout=10.0)

    def finish_producer(self):
        self.q.close()
        self.q.join_thread()


class PipeTransport:
    name = "pipe"

    def __init__(self):
        self.r, self.w = os.pipe()

    def producer(self):
        w = self.w

        def send(data):
            os.write(w, struct.pack("<I", len(data)))
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.write(w, view[done:])
        return send

    def consumer(self):
        rfd = self.r

        def read_exact(n):
            parts, got = [], 0
            while got < n:
                chunk = os.read(rfd, n - got)
                parts.append(chunk)
                got += len(chunk)
            return b"".join(parts)
        return lambda: read_exact(struct.unpack("<I", read_exact(4))[0])


def _run(transport, produce):
    """Fork a producer running produce(send); return the pid."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            produce(transport.producer())
            getattr(transport, "finish_producer", lambda: None)()
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def throughput(transport, size, count):
    payload = b"x" * size

    def produce(send):
        for _ in range(count):
            send(payload)
    recv = transport.consumer()
    t0 = time.perf_counter()
    pid = _run(transport, produce)
    got = 0
    for _ in range(count):
        got += len(recv())
    dt = time.perf_counter() - t0
    os.waitpid(pid, 0)
    assert got == size * count
    return count / dt, got / dt / 1e6


def latency(transport, count, gap_s):
    """One-way latency with the consumer blocked: the producer waits gap_s between sends."""
    def produce(send):
        pad = b"\0" * (SMALL - STAMP.size)
        for _ in range(count):
            time.sleep(gap_s)
            send(STAMP.pack(time.monotonic_ns()) + pad)
    recv = transport.consumer()
    pid = _run(transport, produce)
    lat = []
    for _ in range(count):
        data = recv()
        lat.append((time.monotonic_ns() - STAMP.unpack_from(data)[0]) / 1e3)
    os.waitpid(pid, 0)
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def idle_cpu(seconds):
    """Fraction of a core an idle consumer burns while waiting for messages that never come."""
    ch = Channel(nslots=64, slot_size=256)
    pid = os.fork()
    if pid == 0:
        r = ch.receiver()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r.receive(timeout=end - time.monotonic())
        os._exit(0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer messages (CI smoke run)")
    args = ap.parse_args()
    k = 10 if args.quick else 1
    n_small, n_big, n_lat = 200_000 // k, 4000 // k, 2000 // k
    res = {}
    for make in (RingTransport, lambda: RingTransport("semaphore"), QueueTransport, PipeTransport):
        name = make().name
        key = {"ring[eventfd]": "", "ring[semaphore]": "sem_", "mp.Queue": "mpqueue_",
               "pipe": "pipe_"}[name]
        ns = n_small if key in ("", "sem_", "pipe_") else n_small // 4
        mps, mbs = throughput(make(), SMALL, ns)
        bmps, bmbs = throughput(make(), BIG, n_big)
        p50, p99 = latency(make(), n_lat, 0.0005)
        print(f"{name:16s} small {mps:12,.0f} msg/s {mbs:8.1f} MB/s | 64KiB {bmps:9,.0f} msg/s "
              f"{bmbs:8.1f} MB/s | one-way p50 {p50:7.1f} us p99 {p99:8.1f} us")
        res.update({f"{key}small_msgs_per_s": round(mps), f"{key}small_mb_s": round(mbs, 1),
                    f"{key}big_msgs_per_s": round(bmps), f"{key}big_mb_s": round(bmbs, 1),
                    f"{key}p50_us": round(p50, 1), f"{key}p99_us": round(p99, 1)})
    res["idle_consumer_core_frac"] = round(idle_cpu(2.0 / k), 4)
    res["small_vs_mpqueue"] = round(res["small_msgs_per_s"] / res["mpqueue_small_msgs_per_s"], 2)
    print(f"idle consumer: {100 * res['idle_consumer_core_frac']:.2f} % of a core; "
          f"ring small throughput = {res['small_vs_mpqueue']}x mp.Queue")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
