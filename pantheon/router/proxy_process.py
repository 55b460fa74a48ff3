"""Run HAProxy as a child of the router: start it, wait for its runtime API, restart it when it dies."""

import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import threading
import time

from pantheon.errors import PantheonError
from pantheon.router.runtime_api import ProxyError, RuntimeApi

START_TIMEOUT_S = 15.0
MAX_BACKOFF_S = 5.0
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the forked child before exec: the kernel SIGKILLs haproxy if the router dies (even by SIGKILL)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class ProxyStartError(PantheonError):
    """HAProxy refused its configuration or never opened its runtime API."""


def check_version(binary):
    """HAProxy 2.6 or later (dynamic servers with health checks, json_query) built with Lua (the stream
    guard's filter), or ProxyStartError."""
    try:
        out = subprocess.run([binary, "-vv"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProxyStartError(f"cannot run {binary!r} ({e}); install HAProxy 2.6+ (Debian: apt-get install haproxy)")
    m = re.search(r"version (\d+)\.(\d+)", out)
    if m is None or (int(m[1]), int(m[2])) < (2, 6):
        found = f"{m[1]}.{m[2]}" if m else "an unknown version"
        raise ProxyStartError(f"{binary} is {found}; `pantheon router` needs HAProxy 2.6 or later")
    if "USE_LUA=1" not in out and "Built with Lua" not in out:
        raise ProxyStartError(f"{binary} was built without Lua; `pantheon router` loads a Lua filter "
                              "(Debian's haproxy package has it)")


class ProxyProcess:
    """One haproxy process at a time; `on_restart()` runs (in the watcher thread) after each restart."""

    def __init__(self, binary, paths, on_restart, log):
        self.binary, self.paths, self.on_restart, self.log = binary, paths, on_restart, log
        self.api = RuntimeApi(paths.socket)
        self.proc = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._watcher = None

    def start(self):
        check_version(self.binary)
        check = subprocess.run([self.binary, "-c", "-q", "-f", self.paths.config], capture_output=True, text=True)
        if check.returncode != 0:
            raise ProxyStartError(f"haproxy refused {self.paths.config}:\n{check.stderr or check.stdout}")
        self._launch()
        self._watcher = threading.Thread(target=self._watch, name="haproxy-watch", daemon=True)
        self._watcher.start()

    def _launch(self):
        if os.path.exists(self.paths.socket):
            os.unlink(self.paths.socket)
        self.proc = subprocess.Popen([self.binary, "-db", "-f", self.paths.config], stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ProxyStartError(f"haproxy exited with {self.proc.returncode} while starting")
            try:
                self.api.command("show info")
                return
            except ProxyError:
                time.sleep(0.05)
        raise ProxyStartError(f"haproxy did not open {self.paths.socket} within {START_TIMEOUT_S:.0f} s")

    def _watch(self):
        backoff = 0.2
        while not self._stopping.is_set():
            code = self.proc.wait()
            if self._stopping.is_set():
                return
            self.log(f"haproxy (pid {self.proc.pid}) exited with {code}; restarting in {backoff:.1f} s")
            time.sleep(backoff)
            try:
                self._launch()
            except ProxyStartError as e:
                self.log(str(e))
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            self.restarts += 1
            backoff = 0.2
            self.on_restart()

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=5.0):
        self._stopping.set()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
