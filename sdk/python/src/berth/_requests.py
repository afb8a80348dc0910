"""Every unary call of the HTTP API as a Req: path, query, body and how to read the answer. The sync and
async clients share these, so the two can only differ in how they wait."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ._errors import ApprovalPending, DeniedError
from ._models import (
    Approval,
    AuditEntry,
    AuditVerification,
    CallResult,
    CreatedTenant,
    FileEntry,
    FileStat,
    Gate,
    Health,
    KillResult,
    Plan,
    Policy,
    ProcessInfo,
    ProcessKill,
    Snapshot,
    Tenant,
    Tool,
    ToolDefinition,
)
from ._transport import Req, seg

Obj = dict[str, Any]


def _ses(session_id: str) -> str:
    return f"/sessions/{seg(session_id)}"


def _csv(values: Iterable[str] | str | None) -> str | None:
    if values is None:
        return None
    if isinstance(values, str):
        return values
    v = ",".join(values)
    return v or None


def _obj(o: Any) -> Obj:
    return o  # type: ignore[no-any-return]


def _drop_none(d: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in d.items() if v is not None}


def health() -> Req[Health]:
    return Req("GET", "/healthz", Health.from_wire, root=True, accept=(503,))


# ---- sessions ----


def create_session(
    *,
    objective: str | None,
    memory_mb: int | None,
    cpus: float | None,
    idle_timeout_s: int | None,
    env: Mapping[str, str] | None,
    backend: str | None,
    metadata: Mapping[str, str] | None,
    tenant_id: str | None,
    template: str | None = None,
    egress_allow: Sequence[str] | None = None,
    egress_allow_cidr: Sequence[str] | None = None,
    desktop: bool | Mapping[str, int] | None = None,
    disk_mb: int | None = None,
) -> Req[Obj]:
    body = _drop_none(
        {
            "objective": objective,
            "memoryMb": memory_mb,
            "diskMb": disk_mb,
            "cpus": cpus,
            "idleTimeoutS": idle_timeout_s,
            "env": dict(env) if env is not None else None,
            "backend": backend,
            "metadata": dict(metadata) if metadata is not None else None,
            "tenantId": tenant_id,
            "template": template,
            "egressAllow": list(egress_allow) if egress_allow is not None else None,
            "egressAllowCidr": list(egress_allow_cidr) if egress_allow_cidr is not None else None,
            "desktop": (dict(desktop) if isinstance(desktop, Mapping) else desktop) if desktop is not None and desktop is not False else None,
        }
    )
    return Req("POST", "/sessions", _obj, json=body, long=True, idempotent=True)


def get_session(session_id: str) -> Req[Obj]:
    return Req("GET", _ses(session_id), _obj)


def list_sessions(states: Iterable[str] | str | None) -> Req[list[Obj]]:
    return Req("GET", "/sessions", lambda o: list(o["sessions"]), query={"state": _csv(states)})


def terminate(session_id: str) -> Req[Obj]:
    return Req("DELETE", _ses(session_id), _obj, long=True)


def lifecycle(session_id: str, verb: str) -> Req[Obj]:
    return Req("POST", f"{_ses(session_id)}/{verb}", _obj, json={}, long=True)


def snapshot(session_id: str, name: str | None) -> Req[Snapshot]:
    return Req("POST", f"{_ses(session_id)}/snapshots", Snapshot.from_wire, json=_drop_none({"name": name}), long=True, idempotent=True)


# ---- exec and files ----


def exec_path(session_id: str, exec_id: str, verb: str) -> str:
    return f"{_ses(session_id)}/execs/{seg(exec_id)}/{verb}"


def exec_body(argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None, timeout: float | None, stdin: bool) -> Obj:
    if isinstance(argv, (str, bytes)):
        # A lone string would be split into characters; say so instead of running nonsense.
        from ._errors import InvalidArgumentError

        raise InvalidArgumentError("argv: must be a list of strings, e.g. ['sh', '-c', 'echo hi']", details={"field": "argv"})
    body: Obj = {"argv": list(argv), "stdin": stdin}
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            from ._errors import InvalidArgumentError

            raise InvalidArgumentError(f"timeout: must be seconds ≥ 0, got {timeout!r}", details={"field": "timeout"})
        body["timeoutMs"] = round(timeout * 1000)
    return body


def kill(session_id: str, exec_id: str, signal: int | str | None) -> Req[KillResult]:
    return Req(
        "POST",
        exec_path(session_id, exec_id, "kill"),
        lambda o: KillResult(exec_id=o["execId"], signal=o["signal"]),
        json=_drop_none({"signal": signal}),
    )


# ---- background processes ----


def start_background(session_id: str, argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None, timeout: float | None) -> Req[tuple[str, int]]:
    body = exec_body(argv, cwd, env, timeout, False)
    del body["stdin"]  # a background command has none (/dev/null)
    body["background"] = True
    return Req("POST", f"{_ses(session_id)}/exec", lambda o: (o["execId"], o["pid"]), json=body)


def process_path(session_id: str, exec_id: str) -> str:
    return f"{_ses(session_id)}/processes/{seg(exec_id)}"


def list_processes(session_id: str) -> Req[list[ProcessInfo]]:
    return Req("GET", f"{_ses(session_id)}/processes", lambda o: [ProcessInfo.from_wire(p) for p in o["processes"]])


def get_process(session_id: str, exec_id: str) -> Req[ProcessInfo]:
    return Req("GET", process_path(session_id, exec_id), ProcessInfo.from_wire)


def kill_process(session_id: str, exec_id: str, signal: int | str | None) -> Req[ProcessKill]:
    return Req(
        "POST",
        f"{process_path(session_id, exec_id)}/kill",
        lambda o: ProcessKill(exec_id=o["execId"], signal=o["signal"], signalled=o["signalled"]),
        json=_drop_none({"signal": signal}),
    )


def output_query(follow: bool, offset: str | int | None) -> dict[str, object]:
    if offset is not None and (isinstance(offset, bool) or not isinstance(offset, (str, int))):
        from ._errors import InvalidArgumentError

        raise InvalidArgumentError(f"offset: must be a byte offset N or a cursor 'N,M', got {offset!r}", details={"field": "offset"})
    return {"follow": True if follow else None, "offset": None if offset is None else str(offset)}


def files_path(session_id: str) -> str:
    return f"{_ses(session_id)}/files"


def list_files(session_id: str, path: str) -> Req[list[FileEntry]]:
    return Req("GET", f"{files_path(session_id)}/list", lambda o: [FileEntry.from_wire(e) for e in o["entries"]], query={"path": path})


def stat(session_id: str, path: str) -> Req[FileStat]:
    return Req("GET", f"{files_path(session_id)}/stat", FileStat.from_wire, query={"path": path})


def mkdir(session_id: str, path: str, parents: bool) -> Req[None]:
    return Req("POST", f"{files_path(session_id)}/mkdir", lambda _o: None, json={"path": path, "parents": parents})


def remove(session_id: str, path: str, recursive: bool) -> Req[None]:
    return Req("DELETE", files_path(session_id), lambda _o: None, query={"path": path, "recursive": recursive})


def write_mode(mode: int | None) -> str | None:
    return None if mode is None else format(mode, "03o")


# ---- snapshots, tenants, audit ----


def get_snapshot(snapshot_id: str) -> Req[Snapshot]:
    return Req("GET", f"/snapshots/{seg(snapshot_id)}", Snapshot.from_wire)


def list_snapshots(session_id: str | None) -> Req[list[Snapshot]]:
    return Req("GET", "/snapshots", lambda o: [Snapshot.from_wire(s) for s in o["snapshots"]], query={"sessionId": session_id})


def delete_snapshot(snapshot_id: str) -> Req[None]:
    return Req("DELETE", f"/snapshots/{seg(snapshot_id)}", lambda _o: None, long=True)


def fork(snapshot_id: str, count: int | None) -> Req[list[Obj]]:
    return Req("POST", f"/snapshots/{seg(snapshot_id)}/fork", lambda o: list(o["sessions"]), json=_drop_none({"count": count}), long=True, idempotent=True)


def create_tenant(name: str) -> Req[CreatedTenant]:
    return Req("POST", "/tenants", CreatedTenant.from_wire, json={"name": name})


def list_tenants() -> Req[list[Tenant]]:
    return Req("GET", "/tenants", lambda o: [Tenant.from_wire(t) for t in o["tenants"]])


def audit_query(session_id: str | None, after_seq: int | None, limit: int | None) -> Req[list[AuditEntry]]:
    q = {"sessionId": session_id, "afterSeq": after_seq, "limit": limit}
    return Req("GET", "/audit", lambda o: [AuditEntry.from_wire(e) for e in o["entries"]], query=q)


def audit_verify() -> Req[AuditVerification]:
    return Req("GET", "/audit/verify", AuditVerification.from_wire)


# ---- the gate ----


def list_tools(session_id: str) -> Req[list[Tool]]:
    return Req("GET", f"{_ses(session_id)}/tools", lambda o: [Tool.from_wire(t) for t in o["tools"]])


def call_tool(session_id: str, tool: str, args: Any, step: str | None, check: bool) -> Req[CallResult]:
    body: Obj = {"tool": tool, "args": {} if args is None else args}
    if step is not None:
        body["step"] = step

    def parse(o: Any) -> CallResult:
        r = CallResult.from_wire(o)
        if check:
            raise_for_decision(r, session_id)
        return r

    # POST /calls takes an Idempotency-Key (the tool in the body): a retry does not run the tool twice.
    return Req("POST", f"{_ses(session_id)}/calls", parse, json=body, long=True, idempotent=True)


def raise_for_decision(r: CallResult, session_id: str | None = None) -> None:
    """DeniedError for a deny, ApprovalPending for a pending call; nothing for an allow."""
    if r.decision == "deny":
        raise DeniedError(
            f"denied at stage {r.stage} ({r.code}): {r.reason}",
            stage=r.stage,
            code=r.code,
            details={"stage": r.stage, "reason": r.reason},
            status=200,
            retryable=r.retryable,
        )
    if r.decision == "pending":
        assert r.approval_id is not None
        raise ApprovalPending(
            f"the call waits for an operator's approval {r.approval_id}",
            approval_id=r.approval_id,
            session_id=session_id,
            details={"approvalId": r.approval_id},
            status=200,
        )


def define_tool(definition: Mapping[str, Any], tenant_id: str | None) -> Req[ToolDefinition]:
    return Req("POST", "/tools", ToolDefinition.from_wire, json=dict(definition), query={"tenantId": tenant_id})


def tool_definitions(tenant_id: str | None) -> Req[list[ToolDefinition]]:
    return Req("GET", "/tools", lambda o: [ToolDefinition.from_wire(t) for t in o["tools"]], query={"tenantId": tenant_id})


def install_tools(session_id: str, tools: Sequence[str]) -> Req[Gate]:
    return Req("PUT", f"{_ses(session_id)}/tools", Gate.from_wire, json={"tools": list(tools)})


def list_approvals(states: Iterable[str] | str | None, session_id: str | None) -> Req[list[Approval]]:
    q = {"state": _csv(states), "sessionId": session_id}
    return Req("GET", "/approvals", lambda o: [Approval.from_wire(a) for a in o["approvals"]], query=q)


def get_approval(session_id: str, approval_id: str) -> Req[Approval]:
    return Req("GET", f"{_ses(session_id)}/approvals/{seg(approval_id)}", Approval.from_wire)


def approve(approval_id: str) -> Req[Approval]:
    return Req("POST", f"/approvals/{seg(approval_id)}/approve", Approval.from_wire, json={}, long=True)


def deny(approval_id: str, reason: str) -> Req[Approval]:
    return Req("POST", f"/approvals/{seg(approval_id)}/deny", Approval.from_wire, json={"reason": reason})


def get_policy(tenant_id: str | None) -> Req[Policy]:
    return Req("GET", "/policy", Policy.from_wire, query={"tenantId": tenant_id})


def set_policy(text: str, tenant_id: str | None) -> Req[Policy]:
    return Req("PUT", "/policy", Policy.from_wire, json={"policy": text}, query={"tenantId": tenant_id})


def get_plan(session_id: str) -> Req[Plan]:
    return Req("GET", f"{_ses(session_id)}/plan", Plan.from_wire)


def set_plan(session_id: str, objective: str, steps: Sequence[Mapping[str, Any]]) -> Req[Plan]:
    return Req("PUT", f"{_ses(session_id)}/plan", Plan.from_wire, json={"objective": objective, "steps": [dict(s) for s in steps]})


def clear_plan(session_id: str) -> Req[Plan]:
    return Req("DELETE", f"{_ses(session_id)}/plan", Plan.from_wire)


def get_gate(session_id: str) -> Req[Gate]:
    return Req("GET", f"{_ses(session_id)}/gate", Gate.from_wire)


def set_gate(
    session_id: str,
    *,
    breaker_failures: int | None,
    breaker_per_minute: int | None,
    http_allow: Sequence[str] | None,
    approval_ttl_s: int | None,
    egress_allow: Sequence[str] | None = None,
    egress_allow_cidr: Sequence[str] | None = None,
) -> Req[Gate]:
    body: Obj = {}
    breaker = _drop_none({"failures": breaker_failures, "perMinute": breaker_per_minute})
    if breaker:
        body["breaker"] = breaker
    if http_allow is not None:
        body["httpAllow"] = list(http_allow)
    if egress_allow is not None:
        body["egressAllow"] = list(egress_allow)
    if egress_allow_cidr is not None:
        body["egressAllowCidr"] = list(egress_allow_cidr)
    if approval_ttl_s is not None:
        body["approvalTtlS"] = approval_ttl_s
    return Req("PUT", f"{_ses(session_id)}/gate", Gate.from_wire, json=body)


def reset_breaker(session_id: str) -> Req[Gate]:
    return Req("POST", f"{_ses(session_id)}/breaker/reset", Gate.from_wire, json={}, long=True)
