"""Control leases (``client.control``) against the real server and real gVisor sessions: while an operator
holds a session's lease the gate refuses its agent's tool calls with ``human_control`` (retryable) and the
operator's own calls still run; someone else can neither take nor hand back the lease without ``force``;
after the hand-back the agent's next call runs. Sync and async."""

from __future__ import annotations

import uuid

import pytest

import berth
from conftest import Server

LEASE_IDLE_S = 600  # the server's default: a lease lapses after 10 minutes without activity by its holder


def test_taking_control_refuses_the_agent_until_it_is_handed_back(client: berth.Berth, server: Server, session: berth.Session) -> None:
    session.files.write("/root/note", "held")
    assert session.agent_token
    with berth.Berth(server.url, session.agent_token) as agent:
        # Before the lease the agent's call runs, so the refusal below is the lease's doing.
        assert agent.tools.call(session.id, "fs.read", {"path": "/root/note"}).decision == "allow"
        free = client.control.get(session.id)
        assert (free.session_id, free.held, free.holder, free.since, free.last_activity_at, free.expires_at) == (session.id, False, None, None, None, None)

        lease = client.control.take(session.id)
        assert (lease.session_id, lease.held, lease.holder) == (session.id, True, "root:root")
        assert lease.since is not None and lease.last_activity_at is not None and lease.expires_at is not None
        assert lease.since.tzinfo is not None
        assert (lease.expires_at - lease.last_activity_at).total_seconds() == pytest.approx(LEASE_IDLE_S, abs=1)
        got = client.control.get(session.id)
        assert (got.held, got.holder, got.since) == (True, "root:root", lease.since)

        with pytest.raises(berth.DeniedError) as refused:
            agent.tools.call(session.id, "fs.read", {"path": "/root/note"})
        assert (refused.value.code, refused.value.stage, refused.value.retryable) == ("human_control", "control", True)
        r = agent.tools.call(session.id, "fs.read", {"path": "/root/note"}, check=False)
        assert (r.decision, r.stage, r.code, r.retryable) == ("deny", "control", "human_control", True)
        assert r.reason and "wait" in r.reason.lower()
        # The operator's own calls still run while it holds the session.
        mine = client.tools.call(session.id, "fs.read", {"path": "/root/note"})
        assert mine.decision == "allow" and "held" in str(mine.result)
        # Taking it again renews the lease: the same start.
        again = client.control.take(session.id)
        assert (again.holder, again.since) == ("root:root", lease.since)
        assert again.expires_at is not None and again.expires_at >= lease.expires_at
        # The agent may neither take nor hand back.
        with pytest.raises(berth.ForbiddenError):
            agent.control.take(session.id)
        with pytest.raises(berth.ForbiddenError):
            agent.control.release(session.id)
        assert agent.tools.call(session.id, "fs.read", {"path": "/root/note"}, check=False).code == "human_control"

        released = client.control.release(session.id)
        assert (released.session_id, released.held, released.holder, released.expires_at) == (session.id, False, None, None)
        assert client.control.get(session.id).held is False
        after = agent.tools.call(session.id, "fs.read", {"path": "/root/note"})
        assert after.decision == "allow" and "held" in str(after.result)

    ends = [e for e in client.audit.query(session_id=session.id) if e.action in ("control.start", "control.end")]
    assert [(e.action, e.data.get("reason")) for e in ends] == [("control.start", None), ("control.end", "handed_back")]


def test_someone_elses_lease_conflicts_until_forced(client: berth.Berth, server: Server) -> None:
    t = client.tenants.create(f"ctl-{uuid.uuid4().hex[:8]}")
    with berth.Berth(server.url, t.api_key) as op:
        with op.sessions.create(memory_mb=256, objective="pytest control") as s:
            held = op.control.take(s.id)
            assert held.holder == f"operator:{t.id}"
            with pytest.raises(berth.ConflictError) as taken:
                client.control.take(s.id)
            assert taken.value.details["holder"] == held.holder
            with pytest.raises(berth.ConflictError):
                client.control.release(s.id)
            assert client.control.get(s.id).holder == held.holder  # the refused calls changed nothing

            forced = client.control.release(s.id, force=True)
            assert (forced.held, forced.holder) == (False, None)
            assert op.control.get(s.id).held is False
            assert op.control.release(s.id).held is False  # nobody holds it: handing back is a no-op
            ends = [e.data["reason"] for e in client.audit.query(session_id=s.id) if e.action == "control.end"]
            assert ends == ["forced"]
        with pytest.raises(berth.InvalidStateError):  # a terminated session has nothing to take over
            op.control.take(s.id)
        with pytest.raises(berth.NotFoundError):
            op.control.get("ses_00000000000000000000")


@pytest.mark.asyncio
async def test_async_control(aclient: berth.AsyncBerth, server: Server) -> None:
    async with await aclient.sessions.create(memory_mb=256, objective="pytest async control") as s:
        assert s.agent_token
        async with berth.AsyncBerth(server.url, s.agent_token) as agent:
            assert (await agent.tools.call(s.id, "fs.list", {"path": "/"})).decision == "allow"
            lease = await aclient.control.take(s.id)
            assert (lease.held, lease.holder) == (True, "root:root")
            assert (await aclient.control.get(s.id)).since == lease.since
            with pytest.raises(berth.DeniedError) as refused:
                await agent.tools.call(s.id, "fs.list", {"path": "/"})
            assert (refused.value.code, refused.value.retryable) == ("human_control", True)
            assert (await aclient.control.release(s.id)).held is False
            assert (await agent.tools.call(s.id, "fs.list", {"path": "/"})).decision == "allow"
