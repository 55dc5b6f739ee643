"""The control socket: one JSON request per connection, answered from the router's loop.

A Unix stream socket (mode 0660: root and the socket's group only; the peer's credentials
are checked too). The request is one line ``{"argv": [...]}``; the reply one line
``{"ok": true, "data": ..., "text": "..."}`` or ``{"ok": false, "error": "..."}``. The
router polls the listening socket with its packet sockets, so commands are applied
between batches and never race the data path.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
from pathlib import Path

from vecroute.control.commands import CommandError, RouterControl, execute

log = logging.getLogger("vecroute.control")
MAX_REQUEST = 64 * 1024


class ControlServer:
    def __init__(self, path: str, router: RouterControl) -> None:
        self.path = path
        self.router = router
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists() or p.is_symlink():
            if _alive(path):
                raise OSError(f"{path}: another vecroute is listening there")
            p.unlink()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o660)
        self.sock.listen(16)
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def handle(self) -> None:
        """Serve every pending connection (called when the socket is readable)."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    self._serve(conn)
                except (OSError, ValueError) as e:
                    log.warning("control connection: %s", e)

    def _serve(self, conn: socket.socket) -> None:
        uid, gid = _peer(conn)
        st = os.stat(self.path)
        if uid not in (0, os.geteuid()) and gid != st.st_gid:
            _send(conn, {"ok": False, "error": "permission denied: root or the socket's group"})
            return
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        try:
            req = json.loads(data.decode() or "null")
            argv = req["argv"]
            if not isinstance(argv, list) or not all(isinstance(w, str) for w in argv):
                raise TypeError
        except (ValueError, TypeError, KeyError):
            _send(conn, {"ok": False, "error": 'malformed request: expected {"argv": [...]}'})
            return
        try:
            reply = execute(self.router, argv)
        except CommandError as e:
            _send(conn, {"ok": False, "error": str(e)})
            return
        except Exception as e:  # noqa: BLE001 - a bad command must never stop forwarding
            log.exception("command %s failed", argv)
            _send(conn, {"ok": False, "error": f"internal error: {e}"})
            return
        _send(conn, {"ok": True, "data": reply.data, "text": reply.text})

    def close(self) -> None:
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _peer(conn: socket.socket) -> tuple[int, int]:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, gid = struct.unpack("3i", creds)
    return uid, gid


def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def _alive(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def request(path: str, argv: list[str], timeout: float = 30.0) -> dict:
    """Client side: send one command, return the reply dict (raises OSError)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps({"argv": argv}).encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data.decode())
