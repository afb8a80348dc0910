"""Ports: ``session.ports.url(port)`` reaches a server a program runs inside a real gVisor sandbox,
through the Berth server's authenticated proxy (sync and async sessions give the same address); a port
link (``session.ports.link``) reaches it with no token until it is revoked or expires."""

from __future__ import annotations

import asyncio

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
    session.files.mkdir("/srv/site", parents=True)
    session.files.write("/srv/site/index.txt", "served through a link\n")
    session.exec(["python3", "-m", "http.server", "8001", "--bind", "127.0.0.1", "--directory", "/srv/site"], background=True)
    link = session.ports.link(8001, ttl_s=600, label="py")
    assert link.url is not None and link.prefix is not None
    url: str = link.url
    assert link.prefix.startswith("/p/") and url == f"{server.url}{link.prefix}/"
    assert (link.session_id, link.port, link.label, link.state, link.created_by, link.revoked_at) == (session.id, 8001, "py", "active", "root:root", None)
    assert link.created_at.tzinfo is not None and (link.expires_at - link.created_at).total_seconds() == pytest.approx(600, abs=1)
    got: list[httpx.Response] = []

    def answered() -> bool:
        r = httpx.get(url + "index.txt")  # no Authorization header
        got.append(r)
        return r.status_code == 200

    assert wait_until(answered, timeout=60, every=0.3), got[-1].text
    assert got[-1].text == "served through a link\n"
    # The token is the credential: another one reaches nothing.
    assert httpx.get(f"{server.url}/p/{'x' * 43}/index.txt").status_code == 404
    [listed] = session.ports.links()
    assert (listed.link_id, listed.state, listed.url, listed.prefix, listed.expires_at) == (link.link_id, "active", None, None, link.expires_at)
    revoked = session.ports.revoke_link(link.link_id)
    assert revoked.state == "revoked" and revoked.revoked_at is not None
    gone = httpx.get(url + "index.txt")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "not_found"
    assert session.ports.revoke_link(link.link_id).state == "revoked"  # idempotent
    for bad in (0, 604_801):
        with pytest.raises(berth.InvalidArgumentError):
            session.ports.link(8001, ttl_s=bad)


def test_a_port_link_expires_and_is_for_operators_only(server: Server, session: berth.Session) -> None:
    session.exec(["python3", "-m", "http.server", "8002", "--bind", "127.0.0.1", "--directory", "/etc"], background=True)
    assert wait_until(lambda: session.run(["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8002/hostname')"]).ok, timeout=60, every=0.3)
    link = session.ports.link(8002, ttl_s=2)
    url = f"{link.url}hostname"
    assert httpx.get(url).status_code == 200
    assert wait_until(lambda: httpx.get(url).status_code == 404, timeout=15, every=0.5)
    assert [x.state for x in session.ports.links()] == ["expired"]
    assert session.agent_token
    with berth.Berth(server.url, session.agent_token) as agent:
        with pytest.raises(berth.ForbiddenError):
            agent.sessions.get(session.id).ports.link(8002)
    assert len(session.ports.links()) == 1  # the refused call made nothing


@pytest.mark.asyncio
async def test_async_port_links(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256) as s:
        await s.exec(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/etc"], background=True)
        link = await s.ports.link(8000, ttl_s=60)
        assert link.url and link.state == "active"
        async with httpx.AsyncClient() as browser:  # no token
            for _ in range(200):
                r = await browser.get(link.url + "hostname")
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.3)
            assert r.status_code == 200 and r.text.strip(), r.text
            assert [x.link_id for x in await s.ports.links()] == [link.link_id]
            assert (await s.ports.revoke_link(link.link_id)).state == "revoked"
            assert (await browser.get(link.url + "hostname")).status_code == 404
