"""Every error class from real answers: the real server's, and for the network failures a socket that
misbehaves in the one way under test. Never a raw httpx exception."""

from __future__ import annotations

import builtins
import socket
import threading
import time
from typing import Iterator

import httpx
import pytest

import berth
from conftest import Server, wait_until
from test_exec import _alive


def _not_httpx(e: BaseException) -> None:
    assert isinstance(e, berth.BerthError)
    assert not isinstance(e, httpx.HTTPError)


def test_server_answers_map_to_their_subclasses(client: berth.Berth, server: Server, session: berth.Session) -> None:
    with pytest.raises(berth.InvalidArgumentError) as bad:
        client.sessions.create(memory_mb=1)
    assert (bad.value.code, bad.value.status, bad.value.field) == ("invalid_argument", 400, "memoryMb")
    with pytest.raises(berth.InvalidArgumentError) as bad_backend:
        client.sessions.create(backend="vmware")
    assert bad_backend.value.field == "backend"

    with pytest.raises(berth.NotFoundError) as nf:
        client.sessions.get("ses_00000000000000000000")
    assert (nf.value.code, nf.value.status) == ("not_found", 404)
    assert nf.value.details["kind"] == "session"

    with pytest.raises(berth.UnauthenticatedError) as unauth:
        berth.Berth(server.url).sessions.list()
    assert (unauth.value.code, unauth.value.status) == ("unauthenticated", 401)
    with pytest.raises(berth.UnauthenticatedError):
        berth.Berth(server.url, "bt_not_a_real_key").sessions.list()

    assert session.agent_token
    with pytest.raises(berth.ForbiddenError) as fb:
        berth.Berth(server.url, session.agent_token).tenants.create("x")
    assert (fb.value.code, fb.value.status) == ("forbidden", 403)

    name = f"dup-{session.id[-6:]}"
    client.tenants.create(name)
    with pytest.raises(berth.ConflictError) as cf:
        client.tenants.create(name)
    assert (cf.value.code, cf.value.status, cf.value.field) == ("conflict", 409, "name")

    with pytest.raises(berth.PayloadTooLargeError) as big:
        client.policy.set("// " + "x" * (2 * 1024 * 1024))  # JSON bodies are capped at 1 MiB
    assert (big.value.code, big.value.status) == ("payload_too_large", 413)

    session.pause()
    with pytest.raises(berth.InvalidStateError) as st:
        session.pause()
    assert (st.value.code, st.value.status) == ("invalid_state", 409)
    with pytest.raises(berth.InvalidStateError):
        session.exec(["true"])
    session.resume()

    for e in (bad.value, nf.value, unauth.value, fb.value, cf.value, big.value, st.value):
        _not_httpx(e)
        assert e.message and str(e).startswith(e.code)


def test_the_server_not_being_there_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(berth.ConnectionError) as e:
        berth.Berth(f"http://127.0.0.1:{port}", "x").sessions.list()
    assert isinstance(e.value, builtins.ConnectionError) and isinstance(e.value, berth.UnavailableError)
    assert (e.value.code, e.value.retryable, e.value.status) == ("unavailable", True, None)
    _not_httpx(e.value)


class _RawServer:
    """A loopback TCP listener that answers each connection with ``reply`` (None: never answers)."""

    def __init__(self, reply: bytes | None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply = reply
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            c.recv(65536)
            if self.reply is not None:
                c.sendall(self.reply)
                c.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture()
def silent() -> Iterator[_RawServer]:
    s = _RawServer(None)
    yield s
    s.close()


def test_client_and_call_timeouts_raise_timeout_error(silent: _RawServer) -> None:
    t0 = time.monotonic()
    with pytest.raises(berth.TimeoutError) as e:
        berth.Berth(silent.url, "x", timeout=0.3).sessions.list()
    assert time.monotonic() - t0 < 5
    assert isinstance(e.value, builtins.TimeoutError) and e.value.code == "timeout" and e.value.retryable
    _not_httpx(e.value)
    # The per-call timeout wins over the client's (None = no limit).
    no_limit = berth.Berth(silent.url, "x", timeout=None)
    t0 = time.monotonic()
    with pytest.raises(berth.TimeoutError):
        no_limit.snapshots.list(timeout=0.3)
    assert time.monotonic() - t0 < 5


def test_an_exec_stream_that_goes_quiet_past_request_timeout_is_dropped_and_killed(session: berth.Session) -> None:
    with pytest.raises(berth.TimeoutError):
        session.run(["sh", "-c", "exec sleep 33"], request_timeout=1.0)
    assert wait_until(lambda: not _alive(session, "slee[p] 33"))


def test_a_body_that_is_not_berths_and_a_cut_answer() -> None:
    proxy = _RawServer(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 13\r\n\r\n<h1>502</h1>\n")
    try:
        with pytest.raises(berth.UnavailableError) as e:
            berth.Berth(proxy.url, "x").sessions.list()
        assert (e.value.code, e.value.status) == ("unavailable", 502)
    finally:
        proxy.close()
    cut = _RawServer(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\nonly ten b")
    try:
        with pytest.raises(berth.ConnectionError) as c:
            berth.Berth(cut.url, "x").snapshots.get("snp_x")  # the connection closes 990 bytes short
        _not_httpx(c.value)
    finally:
        cut.close()


def test_bad_options_raise_config_error() -> None:
    for kwargs in ({"url": "not a url"}, {"url": "ftp://host"}, {"timeout": -1}, {"timeout": "soon"}, {"token": "has space"}, {"token": ""}):
        with pytest.raises(berth.ConfigError) as e:
            berth.Berth(**kwargs)  # type: ignore[arg-type]
        assert isinstance(e.value, ValueError) and e.value.code == "config"


def test_from_env_reads_the_url_token_and_root_key_like_the_cli(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_TOKEN", raising=False)
    monkeypatch.setenv("BERTH_URL", server.url)
    monkeypatch.setenv("BERTH_DATA", str(server.data_dir))
    with berth.Berth.from_env() as b:
        assert b.options.token == server.root_key
        assert isinstance(b.tenants.list(), list)
    monkeypatch.setenv("BERTH_TOKEN", "bt_from_env")
    env = berth.resolve_env()
    assert (env.token, env.token_source) == ("bt_from_env", "BERTH_TOKEN")
    with pytest.raises(berth.UnauthenticatedError):
        berth.Berth.from_env().sessions.list()
    monkeypatch.delenv("BERTH_TOKEN")
    monkeypatch.setenv("BERTH_DATA", "/nonexistent")
    assert berth.resolve_env().token is None
