"""The console's API (``client.console``) against the real server: a sign-in link works once, in a plain
HTTP client that then holds the console cookie; a watch-only link signs its holder in as a watcher of that
one session (its record readable, nothing else) until it is revoked, when the link and the console sessions
opened through it stop working; who am I; policy validation; the live event stream. Sync and async."""

from __future__ import annotations

import asyncio
import threading
import uuid
from contextlib import aclosing
from datetime import datetime, timezone

import httpx
import pytest

import berth
from conftest import Server

#: What the console page sends with a state-changing request (the server's CSRF check).
CSRF = {"x-berth-csrf": "1"}
COOKIE = "berth_console"


def _fragment(url: str, key: str) -> str:
    head, _, value = url.partition(f"/#{key}=")
    assert head and value, url
    return value


def _sign_in(server: Server, body: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{server.url}/console/signin", json=body, headers=CSRF)


def _seconds_from_now(t: datetime) -> float:
    return (t - datetime.now(timezone.utc)).total_seconds()


def test_a_sign_in_link_works_once(client: berth.Berth, server: Server) -> None:
    link = client.console.link()
    assert link.url.startswith(f"{server.url}/#signin=")
    assert 50 < _seconds_from_now(link.expires_at) <= 61
    code = _fragment(link.url, "signin")

    signed_in = _sign_in(server, {"code": code})
    assert signed_in.status_code == 200, signed_in.text
    assert (signed_in.json()["principal"], signed_in.json()["watchSessionId"]) == ("root:root", None)
    cookie = signed_in.cookies[COOKIE]
    # The cookie alone (no token) is now the root's console session.
    me = httpx.get(f"{server.url}/v1/console/me", cookies={COOKIE: cookie})
    assert me.status_code == 200, me.text
    assert me.json()["principal"] == "root:root" and me.json()["handle"].startswith("cs_")
    assert httpx.get(f"{server.url}/v1/console/me").status_code == 401

    reused = _sign_in(server, {"code": code})
    assert (reused.status_code, reused.json()["error"]["code"]) == (401, "unauthenticated")
    assert client.console.link(base_url="https://console.example.com/").url.startswith("https://console.example.com/#signin=")


def test_me_and_policy_validation(client: berth.Berth, server: Server) -> None:
    me = client.console.me()
    assert (me.principal, me.kind, me.tenant_id, me.handle, me.watch_session_id) == ("root:root", "root", None, "", None)
    assert me.idle_logoff_s > 0
    t = client.tenants.create(f"con-{uuid.uuid4().hex[:8]}")
    with berth.Berth(server.url, t.api_key) as op:
        who = op.console.me()
        assert (who.principal, who.kind, who.tenant_id) == (f"operator:{t.id}", "operator", t.id)

        before = op.policy.get()
        good = op.console.validate_policy('permit (principal, action == Action::"fs.read", resource);')
        assert (good.ok, good.errors) == (True, [])
        bad = op.console.validate_policy("permit (principal, action, resource")
        assert bad.ok is False and bad.errors
        unknown = op.console.validate_policy('permit (principal, action == Action::"no.such.tool", resource);')
        assert unknown.ok is False and any("no.such.tool" in e for e in unknown.errors)
        after = op.policy.get()
        assert (after.version, after.text) == (before.version, before.text)  # nothing was saved
        # Root validates for a tenant with tenant_id.
        assert client.console.validate_policy("permit (principal, action, resource", tenant_id=t.id).ok is False


def test_a_watch_link_shows_one_session_until_revoked(client: berth.Berth, server: Server, session: berth.Session) -> None:
    created = client.console.watch_link(session.id, ttl_s=600, label="reviewer")
    assert created.link_id and created.url.startswith(f"{server.url}/#watch=")
    assert 590 < _seconds_from_now(created.expires_at) <= 601
    [listed] = client.console.watch_links(session.id)
    assert (listed.link_id, listed.session_id, listed.label, listed.state, listed.created_by, listed.revoked_at) == (
        created.link_id,
        session.id,
        "reviewer",
        "active",
        "root:root",
        None,
    )
    assert listed.expires_at == created.expires_at
    token = _fragment(created.url, "watch")

    # Whoever opens the link is signed in as a watcher of this one session: no token of theirs involved.
    opened = _sign_in(server, {"watch": token})
    assert opened.status_code == 200, opened.text
    assert (opened.json()["kind"], opened.json()["watchSessionId"]) == ("watcher", session.id)
    with httpx.Client(base_url=server.url, cookies={COOKIE: opened.cookies[COOKIE]}, headers=CSRF) as viewer:
        seen = viewer.get(f"/v1/sessions/{session.id}")
        assert seen.status_code == 200, seen.text
        assert (seen.json()["id"], seen.json()["state"]) == (session.id, "running")
        assert viewer.get(f"/v1/sessions/{session.id}/control").json()["held"] is False
        # Read-only, and only this session.
        pause = viewer.post(f"/v1/sessions/{session.id}/pause", json={})
        assert (pause.status_code, pause.json()["error"]["code"], pause.json()["error"]["details"]["reason"]) == (403, "forbidden", "watch_only")
        assert viewer.get("/v1/sessions").status_code == 403
        assert viewer.get("/v1/sessions/ses_00000000000000000000").status_code == 404
        assert session.refresh().state == "running"

        revoked = client.console.revoke_watch_link(session.id, created.link_id)
        assert (revoked.link_id, revoked.state) == (created.link_id, "revoked")
        assert revoked.revoked_at is not None
        # The console session opened through it has ended, and the link signs nobody in any more.
        ended = viewer.get(f"/v1/sessions/{session.id}")
        assert (ended.status_code, ended.json()["error"]["code"]) == (401, "unauthenticated")
    refused = _sign_in(server, {"watch": token})
    assert (refused.status_code, refused.json()["error"]["code"], refused.json()["error"]["details"]["reason"]) == (401, "unauthenticated", "watch_link")
    assert [(x.link_id, x.state) for x in client.console.watch_links(session.id)] == [(created.link_id, "revoked")]


def test_watch_links_are_checked_and_for_operators_only(client: berth.Berth, session: berth.Session) -> None:
    for bad in (59, 30 * 86_400 + 1):
        with pytest.raises(berth.InvalidArgumentError) as e:
            client.console.watch_link(session.id, ttl_s=bad)
        assert e.value.field == "ttlS"
    with pytest.raises(berth.NotFoundError):
        client.console.revoke_watch_link(session.id, "wl_doesnotexist")
    assert session.agent_token
    with berth.Berth(client.options.url, session.agent_token) as agent:
        with pytest.raises(berth.ForbiddenError):
            agent.console.watch_link(session.id)
        with pytest.raises(berth.ForbiddenError):
            agent.console.watch_links(session.id)
    assert client.console.watch_links(session.id) == []  # the refused calls made nothing


def test_events_stream_audit_entries_as_they_are_appended(client: berth.Berth, session: berth.Session) -> None:
    head = client.audit.query(session_id=session.id)[-1].seq
    done = threading.Event()
    errors: list[BaseException] = []

    def act() -> None:
        # Until the stream has shown one: each take/release appends control.start and control.end.
        try:
            while not done.wait(0.3):
                client.control.take(session.id)
                client.control.release(session.id)
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    worker = threading.Thread(target=act, daemon=True)
    worker.start()
    seen: list[berth.AuditEntry] = []
    stream = client.console.events(after=head, timeout=60)
    try:
        for entry in stream:
            seen.append(entry)
            if entry.action == "control.end" and entry.session_id == session.id:
                break
            assert len(seen) < 1000, [e.action for e in seen]
    finally:
        stream.close()
        done.set()
        worker.join(30)
    assert not errors, errors
    seqs = [e.seq for e in seen]
    assert seqs == sorted(set(seqs)) and seqs[0] > head
    mine = [e.action for e in seen if e.session_id == session.id]
    assert "control.start" in mine and mine.index("control.start") < mine.index("control.end")
    # The entries are the audit log's own.
    logged = {e.seq: e for e in client.audit.query(session_id=session.id, after_seq=head)}
    assert all(logged[e.seq] == e for e in seen if e.session_id == session.id)

    # Without `after` the stream starts from now: nothing appended before it opened comes back.
    head = client.audit.query(session_id=session.id)[-1].seq
    done.clear()
    worker = threading.Thread(target=act, daemon=True)
    worker.start()
    live = client.console.events(timeout=60)
    try:
        first = next(live)
    finally:
        live.close()
        done.set()
        worker.join(30)
    assert not errors, errors
    assert first.seq > head


@pytest.mark.asyncio
async def test_async_console(aclient: berth.AsyncBerth, server: Server) -> None:
    async with await aclient.sessions.create(memory_mb=256, objective="pytest async console") as s:
        link = await aclient.console.link()
        assert link.url.startswith(f"{server.url}/#signin=")
        assert (await aclient.console.me()).principal == "root:root"
        assert (await aclient.console.validate_policy("permit (principal, action, resource")).ok is False

        created = await aclient.console.watch_link(s.id, label="async")
        assert 3590 < _seconds_from_now(created.expires_at) <= 3601  # the default lifetime: 1 h
        assert [(x.link_id, x.label, x.state) for x in await aclient.console.watch_links(s.id)] == [(created.link_id, "async", "active")]
        token = _fragment(created.url, "watch")
        async with httpx.AsyncClient(base_url=server.url, headers=CSRF) as browser:
            opened = await browser.post("/console/signin", json={"watch": token})
            assert opened.status_code == 200 and opened.json()["watchSessionId"] == s.id
            assert (await aclient.console.revoke_watch_link(s.id, created.link_id)).state == "revoked"
            refused = await browser.post("/console/signin", json={"watch": token})
            assert refused.status_code == 401

        head = (await aclient.audit.query(session_id=s.id))[-1].seq
        seen: list[str] = []

        async def act() -> None:
            while True:
                await aclient.control.take(s.id)
                await aclient.control.release(s.id)
                await asyncio.sleep(0.3)

        task = asyncio.create_task(act())
        try:
            async with aclosing(aclient.console.events(after=head, timeout=60)) as stream:
                async for entry in stream:
                    assert entry.seq > head
                    if entry.session_id == s.id:
                        seen.append(entry.action)
                    if entry.action == "control.end" and entry.session_id == s.id:
                        break
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert "control.start" in seen and seen[-1] == "control.end"
