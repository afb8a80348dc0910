"""Terminals (``session.terminals``): PTYs kept inside the sandbox, reached over a WebSocket. The first
client to attach holds input; others watch and the server refuses their input. A joiner first receives
the current screen, then live output. Sync client only for now; the WebSocket is a small RFC 6455 client
on the standard library (text frames are JSON control, binary frames are bytes)."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from ._errors import BerthError, ConnectionError, from_wire
from ._transport import SyncTransport, parse_json


def _path(sid: str, *rest: str) -> str:
    return "/".join([f"/sessions/{quote(sid, safe='')}/terminals", *(quote(r, safe="") for r in rest)])


class _WebSocket:
    """A blocking WebSocket client: enough for terminals (no extensions, client frames masked)."""

    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
        raw = socket.create_connection((u.hostname or "127.0.0.1", port), timeout=timeout)
        self.sock: socket.socket = ssl.create_default_context().wrap_socket(raw, server_hostname=u.hostname) if u.scheme == "https" else raw
        key = base64.b64encode(os.urandom(16)).decode()
        target = u.path + (f"?{u.query}" if u.query else "")
        req = f"GET {target} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        self.sock.sendall(req.encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("terminal: the server closed the connection during the upgrade")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v.strip())
            while len(self.buf) < length:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buf += chunk
            self.sock.close()
            try:
                raise from_wire(json.loads(self.buf[:length] or b"{}"), status)
            except ValueError:
                raise from_wire({}, status)
        self.sock.settimeout(None)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, opcode: int, data: bytes) -> None:
        n = len(data)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(head + mask + body)

    def recv(self) -> Tuple[int, bytes]:
        """One message: (opcode, payload); opcode 8 is the close (payload: code and reason)."""
        parts: List[bytes] = []
        first = 0
        while True:
            b0, b1 = self._read(2)
            op = b0 & 0x0F
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            data = self._read(n)
            if op == 9:  # ping
                self.send(10, data)
                continue
            if op == 10:
                continue
            if op == 8:
                return 8, data
            if op != 0:
                first = op
            parts.append(data)
            if b0 & 0x80:
                return first, b"".join(parts)

    def close(self) -> None:
        try:
            self.send(8, struct.pack(">H", 1000))
        except OSError:
            pass
        self.sock.close()


class Terminal:
    """One attached client: iterate :meth:`read` for output (the screen first), :meth:`write` to type
    (refused server-side for a watcher: see ``errors``), :meth:`resize`, :meth:`wait` for the exit."""

    def __init__(self, t: SyncTransport, session_id: str, term_id: str, ws: _WebSocket) -> None:
        self._t = t
        self.session_id = session_id
        self.term_id = term_id
        self._ws = ws
        self.client_id = ""
        self.role = "watcher"
        self.cols = 0
        self.rows = 0
        self.errors: List[BerthError] = []
        self.exit: Optional[Dict[str, Any]] = None
        self.closed = False
        self._pending: List[bytes] = []
        while not self.client_id and not self.closed:
            self._pump()
        if not self.client_id:
            raise self.errors[-1] if self.errors else ConnectionError("terminal: closed before hello")

    def _pump(self) -> None:
        try:
            op, data = self._ws.recv()
        except (EOFError, OSError):
            self.closed = True
            return
        if op == 2:
            self._pending.append(data)
        elif op == 1:
            msg = json.loads(data)
            kind = msg.get("type")
            if kind == "hello":
                self.client_id, self.role, self.cols, self.rows = msg["clientId"], msg["role"], msg["cols"], msg["rows"]
            elif kind == "role":
                self.role = msg["role"]
            elif kind == "resize":
                self.cols, self.rows = msg["cols"], msg["rows"]
            elif kind == "exit":
                self.exit = {"code": msg["code"], "signal": msg.get("signal")}
            elif kind == "error":
                self.errors.append(from_wire({"error": msg["error"]}, 400))
        elif op == 8:
            self.closed = True
            self._ws.sock.close()

    def read(self) -> Iterator[bytes]:
        """Output chunks until the terminal ends (or the connection is lost)."""
        while True:
            while self._pending:
                yield self._pending.pop(0)
            if self.closed:
                return
            self._pump()

    def write(self, data: bytes | str) -> None:
        self._ws.send(2, data.encode() if isinstance(data, str) else data)

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send(1, json.dumps({"type": "resize", "cols": cols, "rows": rows}).encode())

    def take_control(self) -> None:
        self._ws.send(1, b'{"type":"control"}')

    def wait(self) -> Dict[str, Any]:
        """Reads to the end; returns ``{"code", "signal"}``. Raises ConnectionError when the connection
        was lost first (attach again)."""
        for _ in self.read():
            pass
        if self.exit is None:
            raise ConnectionError("terminal: the connection closed before the exit; attach again", retryable=True)
        return self.exit

    def kill(self, signal: int | None = None) -> Dict[str, Any]:
        return Terminals(self._t, self.session_id).kill(self.term_id, signal)

    def close(self) -> None:
        """Detaches; the terminal runs on."""
        self._ws.close()
        self.closed = True


class Terminals:
    """``session.terminals``: create, attach, list, get, kill, recording."""

    def __init__(self, t: SyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        res = self._t.open(method, path, json=body) if body is not None else self._t.open(method, path)
        try:
            return parse_json(res.read(), f"{method} {path}")
        finally:
            res.close()

    def create(self, *, cols: int = 80, rows: int = 24, cwd: str | None = None, env: Dict[str, str] | None = None,
               command: List[str] | None = None, mode: str | None = None) -> Terminal:
        body: Dict[str, Any] = {"cols": cols, "rows": rows}
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = env
        if command is not None:
            body["command"] = command
        view = self._json("POST", _path(self._sid), body)
        return self.attach(view["termId"], mode=mode)

    def attach(self, term_id: str, *, mode: str | None = None) -> Terminal:
        ticket = self._json("POST", _path(self._sid, term_id, "tickets"))["ticket"]
        q: Dict[str, str] = {"ticket": ticket}
        if mode is not None:
            q["mode"] = mode
        url = f"{self._t.opts.url}/v1{_path(self._sid, term_id)}?{urlencode(q)}"
        return Terminal(self._t, self._sid, term_id, _WebSocket(url, float(self._t.opts.timeout or 30)))

    def list(self) -> List[Dict[str, Any]]:
        return list(self._json("GET", _path(self._sid))["terminals"])

    def get(self, term_id: str) -> Dict[str, Any]:
        return dict(self._json("GET", _path(self._sid, term_id)))

    def kill(self, term_id: str, signal: int | None = None) -> Dict[str, Any]:
        return dict(self._json("POST", _path(self._sid, term_id, "kill"), {} if signal is None else {"signal": signal}))

    def recording(self, term_id: str) -> str:
        res = self._t.open("GET", _path(self._sid, term_id, "recording"))
        try:
            return res.read().decode()
        finally:
            res.close()
