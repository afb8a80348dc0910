"""Idempotency-Key (issue 7 §11) through both clients against the real server, behind a front that loses
the first answer: the request reaches the server and runs, then the connection is cut before the answer
gets back. The client retries once with the same key and gets the first answer; nothing runs twice."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import httpx
import pytest

import berth
from conftest import Server


class Front:
    """Forwards to the server; loses the answer of the next `drop` POSTs after they ran."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.drop = 0
        self.seen: list[tuple[str, str, str | None]] = []
        front = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                front.seen.append((self.command, self.path, self.headers.get("idempotency-key")))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
                r = httpx.request(self.command, front.upstream + self.path, headers=headers, content=body or None, timeout=120)
                if self.command == "POST" and front.drop > 0:
                    front.drop -= 1
                    self.close_connection = True
                    self.connection.close()  # it ran; the answer is lost
                    return
                self.send_response(r.status_code)
                self.send_header("content-type", r.headers.get("content-type", "application/json"))
                self.send_header("content-length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def posts(self) -> list[tuple[str, str, str | None]]:
        return [s for s in self.seen if s[0] == "POST"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def front(server: Server) -> Iterator[Front]:
    f = Front(server.url)
    try:
        yield f
    finally:
        f.close()


def test_create_and_snapshot_survive_a_lost_answer_once(server: Server, front: Front, client: berth.Berth) -> None:
    before = {s.id for s in client.sessions.list()}
    with berth.Berth(front.url, server.root_key) as b:
        front.drop = 1
        s = b.sessions.create(memory_mb=256, objective="idempotency")
        try:
            a, c = front.posts()
            assert a[2] is not None and len(a[2]) == 36
            assert c[2] == a[2]
            assert {x.id for x in client.sessions.list()} - before == {s.id}
            assert s.agent_token
            front.drop = 1
            snap = s.snapshot(name="idem")
            assert [x.id for x in client.snapshots.list(session_id=s.id)] == [snap.id]
            p = front.posts()
            assert p[-1][2] == p[-2][2] and p[-1][2] != a[2]
            client.snapshots.delete(snap.id)
        finally:
            client.sessions.get(s.id).terminate()


def test_http_errors_are_not_retried(server: Server, front: Front) -> None:
    with berth.Berth(front.url, server.root_key) as b:
        with pytest.raises(berth.BerthError) as e:
            b.sessions.create(memory_mb=-1)
        assert e.value.code == "invalid_argument"
        assert len(front.posts()) == 1


@pytest.mark.asyncio
async def test_async_create_retries_with_the_same_key(server: Server, front: Front, client: berth.Berth) -> None:
    before = {s.id for s in client.sessions.list()}
    async with berth.AsyncBerth(front.url, server.root_key) as b:
        front.drop = 1
        s = await b.sessions.create(memory_mb=256, objective="idempotency-async")
        try:
            a, c = front.posts()
            assert a[2] is not None and c[2] == a[2]
            assert {x.id for x in client.sessions.list()} - before == {s.id}
        finally:
            client.sessions.get(s.id).terminate()
