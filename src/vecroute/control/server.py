"""The control socket: one JSON request per connection, served by the control plane's
asyncio event loop.

A Unix stream socket (mode 0660: root and the socket's group only; the peer's credentials
are checked too). The request is one line ``{"argv": [...]}``; the reply one JSON object
``{"ok": true, "data": ..., "text": "..."}`` or ``{"ok": false, "error": "..."}`` and a
newline, then the server closes the connection. Commands run in the event loop's thread
(the only thread that touches the router object).

Every connection is a task of its own, and everything a client controls is bounded (the
constants below): a client that trickles its request, never sends one, or never reads its
reply holds one connection slot until its timeout and costs the other clients nothing.

Long answers (``show routes`` over a big table) are streamed: the command returns its text
as chunks (``Reply.chunks``) and the reply is written as ``{"ok": true, "text": "`` + each
chunk JSON-escaped + ``", "data": ...}``, waiting for the client to read (``drain``) and
yielding to the loop between chunks, so that the loop's other tasks keep running during a
long render. Escaping chunk by chunk gives exactly the string escaping the whole text gives.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import socket
import stat
import struct
from collections.abc import Awaitable
from json.encoder import encode_basestring_ascii
from pathlib import Path

from vecroute.control.commands import CommandError, Reply, RouterControl, execute

log = logging.getLogger("vecroute.control")

MAX_REQUEST = 64 * 1024  # bytes in the request line
REQUEST_TIMEOUT = 5.0  # seconds to receive the whole request line
WRITE_TIMEOUT = 10.0  # seconds a reply may wait for the client to read (no progress at all)
MAX_CONNECTIONS = 128  # connections served at once; more get an error reply at once
MAX_STREAMS = 4  # streamed replies in progress at once (a full-table listing holds ~46 MB)
MAX_WORDS = 256  # words in argv
MAX_WORD = 4096  # characters in one word
LIST_STEP = 1000  # items of a data list encoded between two yields to the loop
BACKLOG = 128  # listen() backlog

MALFORMED = 'malformed request: expected one line {"argv": ["word", ...]}'


class RequestError(ValueError):
    """A request the server refuses before running any command (one line)."""


class ControlServer:
    """The control socket on an asyncio loop: ``await start()``, then ``close()``."""

    def __init__(self, path: str, router: RouterControl) -> None:
        self.path = path
        self.router = router
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        claim_socket_path(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(path)
            os.chmod(path, 0o660)
            self.sock.listen(BACKLOG)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._streams = 0
        self._closed = False
        self._closing: list[asyncio.Task] = []

    async def start(self) -> None:
        """Start accepting (call from inside the running loop that will serve)."""
        self._server = await asyncio.start_unix_server(
            self._handle, sock=self.sock, limit=MAX_REQUEST, backlog=BACKLOG
        )

    def close(self) -> None:
        """Stop accepting, drop every client, remove the socket file (from the loop's thread)."""
        if self._closed:
            return
        self._closed = True
        self._closing = stop_serving(self._server, self.sock, self._conns)
        try:
            os.unlink(self.path)
        except OSError:
            pass

    async def wait_closed(self) -> None:
        """After close(): wait until every connection's task has finished."""
        await asyncio.gather(*self._closing, return_exceptions=True)

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return len(self._conns)

    @property
    def streams(self) -> int:
        """Streamed replies being written now."""
        return self._streams

    # -- one connection ---------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed or len(self._conns) >= MAX_CONNECTIONS:
            # never wait here: the error fits in the socket buffer, close() does not block
            writer.write(_line(_error(f"busy: {MAX_CONNECTIONS} control connections open")))
            writer.close()
            return
        await serve_connection(self._conns, writer, self._serve(reader, writer),
                               "control connection", logging.INFO, WRITE_TIMEOUT)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        if not peer_allowed(conn, os.stat(self.path).st_gid):
            await _send(writer, _error("permission denied: root or the socket's group"))
            return
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                data = await _read_request(reader)
            argv = parse_request(data)
        except TimeoutError:
            msg = f"request timeout: no complete request line in {REQUEST_TIMEOUT:g} s"
            await _send(writer, _error(msg))
            return
        except RequestError as e:
            await _send(writer, _error(str(e)))
            return
        try:
            reply = execute(self.router, argv)
        except CommandError as e:
            await _send(writer, _error(str(e)))
            return
        except Exception as e:  # noqa: BLE001 - a bad command must never stop the router
            log.exception("command %s failed", argv)
            await _send(writer, _error(f"internal error: {e}"))
            return
        if reply.chunks is None:
            try:
                out = _line({"ok": True, "data": reply.data, "text": reply.text})
            except (TypeError, ValueError) as e:
                log.exception("command %s: reply not JSON", argv)
                out = _line(_error(f"internal error: {e}"))
            await _send(writer, out)
            return
        if self._streams >= MAX_STREAMS:
            _close_iterator(reply.chunks)
            await _send(writer, _error(f"busy: {MAX_STREAMS} long listings in progress, retry"))
            return
        self._streams += 1
        try:
            await self._stream(writer, reply, argv)
        finally:
            self._streams -= 1
            _close_iterator(reply.chunks)

    async def _stream(self, writer: asyncio.StreamWriter, reply: Reply, argv: list[str]) -> None:
        """Write a streamed reply: the text chunk by chunk, then the data.

        Write errors and timeouts propagate (the connection is dropped); an error of the
        command's own iterator still ends the reply as well-formed JSON, with ``"ok": false``.
        """
        writer.write(b'{"ok": true, "text": "')
        chunks = iter(reply.chunks)
        tail = None
        while tail is None:
            try:
                piece = next(chunks, None)
                if piece is None:  # done: the data is final now
                    tail = ['", "data": ', *(await _json_pieces(reply.data))]
                    if reply.data_error:
                        tail.append(', "data_error": ' + json.dumps(reply.data_error))
                    break
                out = encode_basestring_ascii(piece)[1:-1].encode("ascii") if piece else b""
            except Exception as e:  # noqa: BLE001 - the client still gets a well-formed error
                log.exception("command %s failed while streaming", argv)
                # json.loads keeps the last of duplicate keys: the reply reads as ok: false
                tail = ['", "ok": false, "error": ', json.dumps(f"internal error: {e}")]
                break
            if out:
                writer.write(out)
                await _drain(writer)
            await asyncio.sleep(0)  # the loop's other tasks run between two chunks
        tail.append("}\n")
        writer.write("".join(tail).encode("ascii"))
        await _drain(writer)


async def _json_pieces(data) -> list[str]:
    """json.dumps(data) in pieces; a long list yields to the loop every LIST_STEP items."""
    if not isinstance(data, list) or len(data) <= LIST_STEP:
        return [json.dumps(data)]
    out = ["["]
    for i in range(0, len(data), LIST_STEP):
        part = json.dumps(data[i : i + LIST_STEP])[1:-1]
        out.append(part if i == 0 else ", " + part)
        await asyncio.sleep(0)
    out.append("]")
    return out


def parse_request(data: bytes) -> list[str]:
    """The argv of one request line, or RequestError (one line)."""
    try:
        req = json.loads(data.decode() or "null")
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise RequestError(MALFORMED) from None
    if not isinstance(req, dict) or not isinstance(req.get("argv"), list):
        raise RequestError(MALFORMED)
    argv = req["argv"]
    if not all(isinstance(w, str) for w in argv):
        raise RequestError('malformed request: "argv" must be a list of strings')
    if len(argv) > MAX_WORDS:
        raise RequestError(f"request too long: {len(argv)} words, at most {MAX_WORDS}")
    for i, w in enumerate(argv):
        if len(w) > MAX_WORD:
            raise RequestError(f"request too long: word {i} has more than {MAX_WORD} characters")
        try:
            w.encode()
        except UnicodeEncodeError:  # "\ud800" in the JSON: no text a command could mean
            raise RequestError(f"malformed request: word {i} is not valid Unicode") from None
    return argv


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """The request line without its newline (or what came before EOF)."""
    buf = bytearray()
    while True:
        chunk = await reader.read(4096)
        if not chunk:
            break
        nl = chunk.find(b"\n")
        if nl >= 0:
            buf += chunk[:nl]
            break
        buf += chunk
        if len(buf) > MAX_REQUEST:
            break
    if len(buf) > MAX_REQUEST:
        raise RequestError(f"request too large: more than {MAX_REQUEST} bytes")
    return bytes(buf)


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait until the client has read enough; TimeoutError after WRITE_TIMEOUT without."""
    async with asyncio.timeout(WRITE_TIMEOUT):
        await writer.drain()


async def _send(writer: asyncio.StreamWriter, data: bytes | dict) -> None:
    writer.write(data if isinstance(data, bytes) else _line(data))
    await _drain(writer)


def _close_iterator(it) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()


def _error(msg: str) -> dict:
    return {"ok": False, "error": msg}


def _line(obj: dict) -> bytes:
    return json.dumps(obj).encode() + b"\n"


SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13


def _peer(conn) -> tuple[int, int]:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, gid = struct.unpack("3i", creds)
    return uid, gid


def peer_groups(conn, uid: int, gid: int) -> set[int]:
    """The peer's groups, supplementary ones included: what the kernel checked when it
    let the peer connect (SO_PEERGROUPS), else the groups the user database gives its
    uid (an unknown uid has only its primary group)."""
    try:
        # Python allows at most 1024 bytes (256 groups); more: ERANGE, the fallback
        raw = conn.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 1024)
        return {gid, *struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])}
    except OSError:
        pass
    try:
        return {gid, *os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)}
    except (KeyError, OSError):
        return {gid}


def peer_allowed(conn, sock_gid: int) -> bool:
    """Root, the router's own user, or a member of the socket's group (primary or
    supplementary: `usermod -aG vecroute alice` is how a user is let in)."""
    uid, gid = _peer(conn)
    return uid in (0, os.geteuid()) or sock_gid in peer_groups(conn, uid, gid)


def claim_socket_path(path: str) -> None:
    """Make ``path`` free for a new control socket, or raise OSError (one line): a stale
    socket (nobody listening) is removed; a live one (another router) or anything that is
    not a socket (a file, a directory, a symlink) is left alone and refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        kind = ("a symlink" if stat.S_ISLNK(st.st_mode) else
                "a directory" if stat.S_ISDIR(st.st_mode) else "not a socket")
        raise OSError(f"{path} exists and is {kind}: refusing to replace it "
                      f"(remove it, or set [control] socket)")
    if _alive(path):
        raise OSError(f"{path}: another vecroute is listening there")
    os.unlink(path)


def _alive(path: str) -> bool:
    """Whether a server answers at ``path``; only a refused connection (or no file) says
    no: a full backlog (timeout) is a live router too busy to accept at once."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(path)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True
    finally:
        s.close()


async def serve_connection(conns: dict, writer: asyncio.StreamWriter, body: Awaitable,
                           what: str, drop_level: int, write_timeout: float) -> None:
    """One connection's life: registered in ``conns`` (task -> writer) while ``body``
    runs, then closed within ``write_timeout`` (its tail reaches the client); a timeout,
    an OS error or a bug aborts it, never the server."""
    task = asyncio.current_task()
    conns[task] = writer
    try:
        await body
        writer.close()
        async with asyncio.timeout(write_timeout):
            await writer.wait_closed()
    except (TimeoutError, OSError) as e:
        log.log(drop_level, "%s dropped: %s", what, e or type(e).__name__)
        writer.transport.abort()
    except asyncio.CancelledError:
        writer.transport.abort()
        raise
    except Exception:  # noqa: BLE001 - one connection's bug must not stop the server
        log.exception("%s failed", what)
        writer.transport.abort()
    finally:
        conns.pop(task, None)


def stop_serving(server: asyncio.AbstractServer | None, sock: socket.socket,
                 conns: dict) -> list[asyncio.Task]:
    """Stop accepting (the server, or its socket if it never started) and abort every
    client connection (``conns``: task -> writer); returns the tasks to wait for."""
    if server is not None:
        server.close()
    else:
        sock.close()
    closing = list(conns)
    for task, writer in list(conns.items()):
        writer.transport.abort()
        task.cancel()
    return closing


def request(path: str, argv: list[str], timeout: float = 30.0) -> dict:
    """Client side: send one command, return the reply dict (raises OSError, ValueError)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        try:
            s.sendall(json.dumps({"argv": argv}).encode() + b"\n")
        except BrokenPipeError:
            pass  # refused before the request was read (busy, permission): the reply is there
        parts = []
        while True:
            try:
                chunk = s.recv(1 << 20)
            except ConnectionResetError:  # closed with our request unread, after its reply
                break
            if not chunk:
                break
            parts.append(chunk)
    return json.loads(b"".join(parts).decode())
