"""A client of HAProxy's runtime API (the admin-level stats socket): one command per connection."""

import socket

from pantheon.errors import PantheonError


class ProxyError(PantheonError):
    """HAProxy's runtime API refused a command or could not be reached."""


class RuntimeApi:
    """Send commands to HAProxy's stats socket at `path`; each call opens its own connection."""

    def __init__(self, path, timeout=5.0):
        self.path, self.timeout = path, timeout

    def command(self, line):
        """The reply text of one command (HAProxy closes the connection after it)."""
        if "\n" in line:
            raise ValueError("one command per call")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(self.timeout)
            try:
                s.connect(self.path)
                s.sendall(line.encode() + b"\n")
                return _read_all(s).decode("utf-8", "replace")
            except OSError as e:
                raise ProxyError(f"haproxy runtime API {self.path}: {e}") from None

    def checked(self, line, ok=("",)):
        """Run `line`; a reply that is neither empty nor starts with one of `ok` raises ProxyError."""
        reply = self.command(line).strip()
        if reply and not any(reply.startswith(p) for p in ok if p):
            raise ProxyError(f"haproxy refused {line!r}: {reply}")
        return reply

    def servers(self, backend):
        """{server name: {field: value}} from `show servers state` for one backend."""
        lines = self.command(f"show servers state {backend}").splitlines()
        header = next((ln for ln in lines if ln.startswith("# be_id")), None)
        if header is None:
            return {}
        names = header[2:].split()
        rows = [dict(zip(names, ln.split())) for ln in lines if ln and not ln.startswith("#") and " " in ln]
        return {r["srv_name"]: r for r in rows if "srv_name" in r}

    def sessions(self, backend):
        """{server name: current sessions} from `show stat` (CSV) for one backend."""
        lines = self.command("show stat").splitlines()
        if not lines or not lines[0].startswith("# "):
            return {}
        cols = lines[0][2:].split(",")
        out = {}
        for ln in lines[1:]:
            row = dict(zip(cols, ln.split(",")))
            if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND", None):
                out[row["svname"]] = int(row.get("scur") or 0) + int(row.get("qcur") or 0)
        return out


def _read_all(s):
    chunks = []
    while True:
        data = s.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
