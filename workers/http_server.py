"""The front's waitress server, sized for LLM serving: connection limit, idle and header deadlines."""

import time

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher, WSGITask

from pantheon.serve.settings import STREAM_END_HEADER

SWEEP_S = 1  # how often idle and slow channels are looked for
HEADER_BYTES = 64 * 1024  # request line + headers; more is a 431 from waitress
STREAM_END_KEY = STREAM_END_HEADER.upper().replace("-", "_")  # waitress's spelling of request headers


class _Task(WSGITask):
    """Behind `pantheon router` (its X-Pantheon-Stream-End: close), a response of unknown length (an event
    stream) is delimited by closing the connection instead of chunked: HAProxy sees a chunked stream cut
    short as a transport error and runs no filter, while an early close is an end of input its stream
    guard turns into an error event for the client (pantheon/router/stream_guard.lua)."""

    def build_response_header(self):
        if not self._close_delimit():
            return super().build_response_header()
        version, self.version = self.version, "1.0"  # waitress chunks every 1.1 body of unknown length
        head = super().build_response_header()  # 1.0 framing: no chunks, Connection: close
        self.version = version
        return b"HTTP/" + version.encode() + head[len(b"HTTP/1.0"):]

    def _close_delimit(self):
        asked = self.request.headers.get(STREAM_END_KEY, "").strip().lower() == "close"
        return asked and self.content_length is None and not any(
            name.lower() == "content-length" for name, _ in self.response_headers)


class _Channel(HTTPChannel):
    """Remembers when the request now being received sent its first byte (the header deadline's start)."""

    first_byte = 0.0
    task_class = _Task

    def received(self, data):
        if data and self.request is None:
            self.first_byte = time.monotonic()
        return super().received(data)

    def slow_headers(self, now, limit):
        request = self.request
        return request is not None and not request.headers_finished and now - self.first_byte > limit


class _Server(TcpWSGIServer):
    channel_class = _Channel
    header_timeout = 10

    def responding(self):
        """Whether any response is still being produced or has bytes not yet sent (an idle keep-alive
        connection is neither)."""
        return any(c.requests or c.total_outbufs_len for c in list(self.active_channels.values()))

    def maintenance(self, now):
        """Waitress closes channels idle past channel_timeout; also close those slow to send headers
        (a slowloris client trickling a byte at a time is never idle, so only a deadline stops it)."""
        super().maintenance(now)
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            if not channel.requests and channel.slow_headers(mono, self.header_timeout):
                channel.will_close = True


def create_front_server(app, sock, limits):
    """A waitress server for `app` on the inherited listening `sock`; `limits` is settings.HttpLimits.

    poll() instead of select() lifts the 1024-descriptor ceiling; max_request_body_size makes waitress
    answer 413 from the Content-Length header instead of spooling an oversized body to disk first.
    channel_request_lookahead > 0 exposes environ["waitress.client_disconnected"].
    """
    adj = Adjustments(sockets=[sock], threads=limits.threads, connection_limit=limits.connection_limit,
                      channel_timeout=limits.idle_timeout, cleanup_interval=SWEEP_S, asyncore_use_poll=True,
                      max_request_body_size=limits.body_limit, max_request_header_size=HEADER_BYTES,
                      channel_request_lookahead=5, ident="pantheon",
                      clear_untrusted_proxy_headers=True)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    sockinfo = (sock.family, sock.type, sock.proto, sock.getsockname())
    server = _Server(app, {}, True, sock, dispatcher=dispatcher, adj=adj, bind_socket=False, sockinfo=sockinfo)
    server.header_timeout = limits.header_timeout
    return server
