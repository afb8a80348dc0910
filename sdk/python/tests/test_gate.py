"""The tool gate through the sync client: allow, deny, approval, plan, gate settings, audit, tenants."""

from __future__ import annotations

import base64
import uuid

import pytest

import berth
from conftest import Server

# Tenant-scoped state (policy) is per tenant, so each test that changes it works in a tenant of its own.
GATED_POLICY = """
permit (principal, action == Action::"fs.read", resource);
@approval("required")
permit (principal, action == Action::"fs.write", resource);
"""


@pytest.fixture()
def tenant(client: berth.Berth, server: Server) -> berth.Berth:
    t = client.tenants.create(f"t-{uuid.uuid4().hex[:8]}")
    assert t.api_key
    return berth.Berth(server.url, t.api_key)


def test_tools_list_and_an_allowed_call(client: berth.Berth, session: berth.Session) -> None:
    names = {t.name for t in client.tools.list(session.id)}
    assert {"shell.exec", "fs.read", "fs.write", "fs.list"} <= names
    session.files.write("/root/note", "hello gate")
    r = client.tools.call(session.id, "fs.read", {"path": "/root/note"})
    assert r.decision == "allow"
    assert "hello gate" in str(r.result)
    # The agent token reaches its own session's tools and nothing else.
    assert session.agent_token is not None
    with berth.Berth(client.options.url, session.agent_token) as agent:
        assert agent.tools.call(session.id, "fs.read", {"path": "/root/note"}).decision == "allow"
        with pytest.raises(berth.ForbiddenError):
            agent.approvals.list()


def test_deny_pending_approve_and_deny_an_approval(client: berth.Berth, tenant: berth.Berth) -> None:
    with tenant:
        assert tenant.policy.set(GATED_POLICY).version >= 1
        assert "fs.write" in tenant.policy.get().text
        with tenant.sessions.create(memory_mb=256) as s:
            # shell.exec is not permitted by this policy: a DeniedError naming the stage and the code.
            with pytest.raises(berth.DeniedError) as denied:
                tenant.tools.call(s.id, "shell.exec", {"command": "echo hi"})
            assert (denied.value.stage, denied.value.code) == ("policy", "policy_denied")
            assert isinstance(denied.value, berth.BerthError)
            r = tenant.tools.call(s.id, "shell.exec", {"command": "echo hi"}, check=False)
            assert (r.decision, r.stage, r.code) == ("deny", "policy", "policy_denied")

            content = base64.b64encode(b"approved content").decode()
            with pytest.raises(berth.ApprovalPending) as pending:
                tenant.tools.call(s.id, "fs.write", {"path": "/root/out", "contentBase64": content})
            approval_id = pending.value.approval_id
            assert approval_id
            assert not s.files.exists("/root/out")  # nothing ran yet
            listed = tenant.approvals.list(states=["pending"])
            assert [a.approval_id for a in listed] == [approval_id]
            a = tenant.approvals.get(s.id, approval_id)
            assert (a.status, a.tool, a.args["path"]) == ("pending", "fs.write", "/root/out")

            done = tenant.approvals.approve(approval_id)
            assert done.status in ("used", "approved")
            assert done.result is not None and done.result.decision == "allow"
            assert s.files.read("/root/out") == b"approved content"
            assert done.decided_at is not None

            # A second parked call, refused by the operator: the agent's retry is denied at stage approval.
            args = {"path": "/root/never", "content": "no"}
            with pytest.raises(berth.ApprovalPending) as second:
                tenant.tools.call(s.id, "fs.write", args)
            refused = tenant.approvals.deny(second.value.approval_id, "not today")
            assert (refused.status, refused.reason) == ("denied", "not today")
            assert not s.files.exists("/root/never")


def test_plan_binds_calls_and_gate_settings_change(client: berth.Berth, session: berth.Session) -> None:
    steps = [{"id": "read-note", "tool": "fs.read", "arguments": {"type": "object", "properties": {"path": {"const": "/etc/hostname"}}}}]
    plan = client.plans.set(session.id, "read the hostname", steps)
    assert plan.plan is not None and plan.plan["objective"] == "read the hostname"
    assert client.plans.get(session.id).plan == plan.plan
    with pytest.raises(berth.DeniedError) as off:
        client.tools.call(session.id, "fs.list", {"path": "/"})
    assert (off.value.stage, off.value.code) == ("plan", "off_plan")
    assert client.tools.call(session.id, "fs.read", {"path": "/etc/hostname"}, step="read-note").decision == "allow"
    assert client.plans.clear(session.id).plan is None

    g = client.gate.set(session.id, breaker_failures=5, http_allow=["example.com"], approval_ttl_s=60)
    assert (g.breaker.failures, g.http_allow, g.approval_ttl_s) == (5, ["example.com"], 60)
    assert client.gate.get(session.id).breaker.failures == 5
    assert client.gate.reset_breaker(session.id).breaker.open is False
    defs = {d.name: d for d in client.tools.definitions()}
    assert defs["fs.read"].builtin and defs["fs.read"].risk == "read" and defs["shell.exec"].input_schema
    gate = client.tools.install(session.id, ["fs.read"])
    assert gate.tools == ["fs.read"]
    assert [t.name for t in client.tools.list(session.id)] == ["fs.read"]


def test_audit_and_tenants(client: berth.Berth, server: Server, session: berth.Session) -> None:
    session.run(["true"])
    entries = client.audit.query(session_id=session.id, limit=100)
    assert entries and all(e.session_id == session.id for e in entries)
    assert "session.create" in [e.action for e in entries]
    assert entries[0].ts.tzinfo is not None and entries[0].hash
    later = client.audit.query(session_id=session.id, after_seq=entries[0].seq)
    # The first query is itself recorded (the request audit) after it answered: later may hold more.
    assert [e.seq for e in later][: len(entries) - 1] == [e.seq for e in entries[1:]]
    v = client.audit.verify()
    assert v.ok and v.entries > 0 and v.head_hash

    t = client.tenants.create(f"acme-{uuid.uuid4().hex[:6]}")
    assert t.id in [x.id for x in client.tenants.list()]
    with berth.Berth(server.url, t.api_key) as acme:
        assert [x.id for x in acme.tenants.list()] == [t.id]
        with pytest.raises(berth.ForbiddenError):
            acme.tenants.create("nope")
        with pytest.raises(berth.ForbiddenError):
            acme.audit.verify()
        with pytest.raises(berth.NotFoundError):  # another tenant's session is invisible
            acme.sessions.get(session.id)
