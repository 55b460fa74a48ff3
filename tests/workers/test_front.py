"""The front's SIGTERM drain: it exits only once every response's last bytes have left for the socket."""

import pytest

from workers import front


class Backend:
    draining = False

    def active(self):
        return 0  # every stream has had its DONE frame

    def end_all(self, message):
        raise AssertionError("nothing outlived the drain")


class Server:
    """Still writing a response's last chunks for the first `busy` polls."""

    def __init__(self, busy):
        self.busy, self.polls = busy, 0

    def responding(self):
        self.polls += 1
        return self.polls <= self.busy


class Exited(Exception):
    pass


def exit_now(code):
    raise Exited(code)


def test_a_stream_whose_last_chunks_are_unsent_holds_the_exit(monkeypatch):
    """The backend forgets a stream at its DONE frame, before [DONE] and the chunk terminator are written
    (a SIGTERM drain once cut such streams short)."""
    monkeypatch.setattr(front.os, "_exit", exit_now)
    server, backend = Server(busy=5), Backend()
    with pytest.raises(Exited):
        front._drain(backend, None, server)
    assert backend.draining and server.polls == 6


def test_a_response_that_never_finishes_does_not_hold_the_exit_past_the_flush_time(monkeypatch):
    monkeypatch.setattr(front.os, "_exit", exit_now)
    monkeypatch.setattr(front, "FLUSH_S", 0.2)
    with pytest.raises(Exited):
        front._drain(Backend(), None, Server(busy=10**9))
