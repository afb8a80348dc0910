"""Ports: ``session.ports.url(port)`` reaches a server a program runs inside a real gVisor sandbox,
through the Berth server's authenticated proxy (sync and async sessions give the same address)."""

from __future__ import annotations

import httpx
import pytest

import berth
from conftest import Server, wait_until


def test_url_reaches_a_server_inside(server: Server, session: berth.Session) -> None:
    session.exec(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/etc"], background=True)
    url = session.ports.url(8000)
    assert url == f"{server.url}/v1/sessions/{session.id}/ports/8000/"
    auth = {"authorization": f"Bearer {server.root_key}"}
    got: list[httpx.Response] = []

    def answered() -> bool:
        r = httpx.get(url + "hostname", headers=auth)
        got.append(r)
        return r.status_code == 200

    assert wait_until(answered, timeout=60, every=0.3), got[-1].text
    assert got[-1].text.strip() != ""
    assert httpx.get(url + "hostname").status_code == 401
    closed = httpx.get(session.ports.url(8001), headers=auth)
    assert closed.status_code == 502
    assert closed.json()["error"]["code"] == "port_closed"


def test_bad_ports_are_refused_locally(session: berth.Session) -> None:
    for bad in (0, 65536, -1):
        with pytest.raises(berth.InvalidArgumentError):
            session.ports.url(bad)


def test_port_links_need_no_token_and_end_when_revoked(server: Server, session: berth.Session) -> None:
    session.exec(["python3", "-m", "http.server", "8001", "--bind", "127.0.0.1", "--directory", "/etc"], background=True)
    link = session.ports.link(8001, ttl_s=600, label="py")
    assert link.url is not None and link.prefix is not None
    assert link.url == f"{server.url}{link.prefix}/"
    assert (link.port, link.label, link.state) == (8001, "py", "active")
    got: list[httpx.Response] = []

    def answered() -> bool:
        r = httpx.get(link.url + "hostname")  # no Authorization header
        got.append(r)
        return r.status_code == 200

    assert wait_until(answered, timeout=60, every=0.3), got[-1].text
    assert [(x.link_id, x.state, x.url) for x in session.ports.links()] == [(link.link_id, "active", None)]
    assert session.ports.revoke_link(link.link_id).state == "revoked"
    gone = httpx.get(link.url + "hostname")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "not_found"
    for bad in (0, 604_801):
        with pytest.raises(berth.InvalidArgumentError):
            session.ports.link(8001, ttl_s=bad)


@pytest.mark.asyncio
async def test_async_port_links(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create() as s:
        link = await s.ports.link(8000, ttl_s=60)
        assert link.url and link.state == "active"
        assert [x.link_id for x in await s.ports.links()] == [link.link_id]
        assert (await s.ports.revoke_link(link.link_id)).state == "revoked"
