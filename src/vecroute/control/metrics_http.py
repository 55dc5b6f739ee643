"""The ``/metrics`` endpoint: a small HTTP/1.1 server on the control plane's event loop.

Not prometheus-client's own ``start_http_server``: that one serves each connection from a
thread of its own with no limits (a client that never finishes its request holds a thread
forever, many clients make many threads), and its scrape would read the FIB and the
neighbour table from that thread while the event loop changes them. Here a connection is
a task on the event loop, and everything a client controls is bounded like the control
socket (the constants below); the exposition itself is prometheus-client's
(``choose_encoder``: the Prometheus text format, or OpenMetrics when the scraper asks).

One request per connection (``Connection: close``), ``GET`` or ``HEAD`` of ``/metrics``
(``/`` says where the metrics are). A scrape is rendered on the loop (~a few ms) and
reused for ``CACHE_S``: clients scraping in a tight loop cost the loop at most one render
per format per ``CACHE_S``, however many of them there are.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from vecroute.control.metrics import MetricsSource, router_registry
from vecroute.control.server import serve_connection, stop_serving

log = logging.getLogger("vecroute.metrics")

MAX_CONNECTIONS = 16  # served at once; more get 503 at once
MAX_HEAD = 8192  # bytes of request line + headers (431 beyond)
MAX_HEADER_LINES = 64
REQUEST_TIMEOUT = 5.0  # seconds to receive the whole request head (408 after)
WRITE_TIMEOUT = 10.0  # seconds the response may wait for the client to read
CACHE_S = 0.5  # a rendered scrape is served again for this long
LINGER_S = 1.0  # after the response, unread input is discarded this long before closing
MAX_LINGERING = 64  # refused connections lingering at once (more are reset at once)
BACKLOG = 64
CODES = (200, 400, 404, 405, 408, 431, 500, 503)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}
INDEX = b"vecroute: the metrics are at /metrics\n"


class HttpError(Exception):
    """A request refused with a status code (and a one-line body)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (OSError when taken: the start fails with
    one line before the ports are touched)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        # a restart may find its last run's connections in TIME_WAIT; a live listener
        # still makes bind fail (Linux SO_REUSEADDR is no SO_REUSEPORT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((host, port))
        s.listen(BACKLOG)
    except OSError:
        s.close()
        raise
    s.setblocking(False)
    return s


class MetricsServer(Collector):
    """``/metrics`` of ``router`` on ``sock`` (from :func:`bind_listener`): ``await
    start()`` inside the loop, then ``close()``. It is also the collector of its own
    ``vecroute_metrics_*`` families."""

    def __init__(self, sock: socket.socket, router: MetricsSource) -> None:
        self.sock = sock
        self.registry = router_registry(router, self)
        self.responses = dict.fromkeys(CODES, 0)
        self.render_seconds = 0.0
        self._cache: dict[tuple[str, bool], tuple[float, bytes]] = {}
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._closed = False
        self._closing: list[asyncio.Task] = []
        self._lingering: set[asyncio.Transport] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, sock=self.sock,
                                                  limit=MAX_HEAD, backlog=BACKLOG)

    def close(self) -> None:
        """Stop accepting and drop every client (from the loop's thread)."""
        if self._closed:
            return
        self._closed = True
        self._closing = stop_serving(self._server, self.sock, self._conns)
        for tr in list(self._lingering):
            tr.abort()
        self._lingering.clear()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._closing, return_exceptions=True)

    @property
    def connections(self) -> int:
        return len(self._conns)

    # -- its own families ------------------------------------------------------------------

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator:
        c = CounterMetricFamily("vecroute_metrics_http_responses",
                                "Responses of the metrics endpoint by status code (503: "
                                "too many connections, 408: request too slow, 431: too "
                                "large).", labels=["code"])
        for code, n in self.responses.items():
            c.add_metric([str(code)], n)
        yield c
        g = GaugeMetricFamily("vecroute_metrics_http_connections",
                              "Connections to the metrics endpoint open now.")
        g.add_metric([], len(self._conns))
        yield g
        g = GaugeMetricFamily("vecroute_metrics_render_seconds",
                              "Event-loop time the previous scrape's rendering took.")
        g.add_metric([], self.render_seconds)
        yield g

    # -- one connection --------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed or len(self._conns) >= MAX_CONNECTIONS:
            self._refuse(writer)
            return
        await serve_connection(self._conns, writer, self._answer(reader, writer),
                               "metrics connection", logging.DEBUG, WRITE_TIMEOUT)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await self._serve(reader)
        if data is None:
            return
        writer.write(data)
        async with asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()
        # a close with unread input (a body, the rest of a huge head) would reset the
        # connection and could destroy the response before the client read it
        writer.write_eof()
        try:
            async with asyncio.timeout(LINGER_S):
                while await reader.read(MAX_HEAD):
                    pass
        except TimeoutError:
            pass

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        """503 without waiting for anything: the answer fits the socket buffer; the
        connection lingers LINGER_S (its request unread would make the close a reset),
        at most MAX_LINGERING of them at once."""
        tr = writer.transport
        writer.write(self._response(503, b"busy: too many metrics connections\n",
                                    extra="Retry-After: 1\r\n"))
        if self._closed or len(self._lingering) >= MAX_LINGERING:
            tr.abort()
            return
        writer.write_eof()
        self._lingering.add(tr)

        def done() -> None:
            self._lingering.discard(tr)
            tr.abort()

        asyncio.get_running_loop().call_later(LINGER_S, done)

    async def _serve(self, reader: asyncio.StreamReader) -> bytes | None:
        """The response to the connection's one request (None: the client left)."""
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                lines = await _read_head(reader)
            if lines is None:
                return None
            method, path, headers = parse_head(lines)
        except TimeoutError:
            return self._response(408, b"request timeout\n")
        except HttpError as e:
            return self._response(e.code, f"{e}\n".encode())
        if method not in ("GET", "HEAD"):
            return self._response(405, b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n")
        if path == "/":
            return self._response(200, INDEX, head=method == "HEAD")
        if path != "/metrics":
            return self._response(404, b"not found: the metrics are at /metrics\n")
        try:
            body, ctype, gz = self.render(headers.get("accept", ""),
                                          "gzip" in headers.get("accept-encoding", ""))
        except Exception:  # noqa: BLE001 - a collector's bug is a 500, never a dead router
            log.exception("metrics: rendering failed")
            return self._response(500, b"internal error: see the router's log\n")
        return self._response(200, body, ctype, head=method == "HEAD",
                              extra="Content-Encoding: gzip\r\n" if gz else "")

    def render(self, accept: str, gz: bool) -> tuple[bytes, str, bool]:
        """The exposition for an Accept header (prometheus-client picks text or
        OpenMetrics), gzipped if asked; reused for CACHE_S."""
        encoder, ctype = choose_encoder(accept)
        key = (ctype, gz)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1], ctype, gz
        t0 = time.perf_counter()
        body = encoder(self.registry)
        if gz:
            body = gzip.compress(body, compresslevel=6)
        self.render_seconds = time.perf_counter() - t0
        self._cache[key] = (now, body)  # at most 2 formats x 2 encodings
        return body, ctype, gz

    def _response(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
                  head: bool = False, extra: str = "") -> bytes:
        self.responses[code] = self.responses.get(code, 0) + 1
        top = (f"HTTP/1.1 {code} {REASONS[code]}\r\nContent-Type: {ctype}\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n")
        return top.encode("latin-1") + (b"" if head else body)


async def _read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    """The request line and header lines (without line ends); None if the client closed
    before sending a whole head. At most MAX_HEAD bytes and MAX_HEADER_LINES lines."""
    lines: list[bytes] = []
    total = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise HttpError(431, f"request head larger than {MAX_HEAD} bytes") from None
        except asyncio.IncompleteReadError:
            return None
        total += len(line)
        if total > MAX_HEAD:
            raise HttpError(431, f"request head larger than {MAX_HEAD} bytes")
        line = line.rstrip(b"\r\n")
        if not line:
            if lines:
                return lines
            continue  # RFC 9112 2.2: empty lines before the request line are ignored
        lines.append(line)
        if len(lines) > MAX_HEADER_LINES:
            raise HttpError(431, f"more than {MAX_HEADER_LINES} header lines")


def parse_head(lines: list[bytes]) -> tuple[str, str, dict[str, str]]:
    """(method, path without the query, headers by lower-case name); HttpError(400)."""
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not parts[0].isalpha():
        raise HttpError(400, "bad request line")
    try:
        method, target = parts[0].decode("ascii"), parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(400, "bad request line") from None
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, sep, value = raw.partition(b":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "bad header line")
        headers[name.decode("latin-1").lower()] = value.decode("latin-1").strip()
    return method, target.partition("?")[0], headers
