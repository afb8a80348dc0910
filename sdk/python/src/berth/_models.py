"""Views of what the server answers, as frozen dataclasses with snake_case names and ``datetime`` where
the wire has an ISO-8601 string. Every view keeps the server's JSON object in ``raw`` (fields added by a
newer server are there before this SDK knows them)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Mapping

SessionState = Literal["creating", "running", "paused", "hibernating", "hibernated", "waking", "failed", "terminated"]
ApprovalStatus = Literal["pending", "approved", "denied", "expired", "used", "cancelled"]
Json = Any
_Obj = Mapping[str, Any]


def parse_time(s: str | None) -> datetime | None:
    """ISO-8601 with ``Z`` (what the server sends) → an aware UTC datetime."""
    if s is None:
        return None
    return datetime.fromisoformat(s)


def _time(s: str) -> datetime:
    t = parse_time(s)
    assert t is not None
    return t


def _ms(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class SessionSettings:
    memory_mb: int
    cpus: float
    idle_timeout_s: int
    #: The names of the environment variables given at create; their values are secrets, never shown back.
    env: list[str]
    #: A desktop's screen, ``{"width": W, "height": H}``; None without a desktop.
    desktop: dict[str, int] | None = None
    #: Room for the session's writes, MiB (gvisor: inside memory_mb; qemu: the disk grown to it); None: the image's disk (qemu).
    disk_mb: int | None = None

    @classmethod
    def from_wire(cls, o: _Obj) -> SessionSettings:
        d = o.get("desktop")
        return cls(
            memory_mb=o["memoryMb"], cpus=o["cpus"], idle_timeout_s=o["idleTimeoutS"], env=list(o["env"]), desktop=dict(d) if d else None, disk_mb=o.get("diskMb")
        )


@dataclass(frozen=True)
class Metering:
    cpu_seconds: float
    peak_memory_bytes: int
    exec_count: int
    bytes_in: int
    bytes_out: int
    #: Outbound connections the egress gate allowed and refused; bytes sent out and received through it.
    egress_connections: int
    egress_refused: int
    egress_bytes_out: int
    egress_bytes_in: int
    #: Seconds spent in each state so far, the current one included.
    state_seconds: dict[str, float]

    @classmethod
    def from_wire(cls, o: _Obj) -> Metering:
        return cls(
            cpu_seconds=o["cpuSeconds"],
            peak_memory_bytes=o["peakMemoryBytes"],
            exec_count=o["execCount"],
            bytes_in=o["bytesIn"],
            bytes_out=o["bytesOut"],
            egress_connections=o.get("egressConnections", 0),
            egress_refused=o.get("egressRefused", 0),
            egress_bytes_out=o.get("egressBytesOut", 0),
            egress_bytes_in=o.get("egressBytesIn", 0),
            state_seconds=dict(o["stateSeconds"]),
        )


@dataclass(frozen=True)
class SessionInfo:
    """``GET /v1/sessions/:id``: the last view of a session the server sent."""

    id: str
    tenant_id: str
    state: SessionState
    backend: str
    objective: str | None
    settings: SessionSettings
    metadata: dict[str, str]
    failure_reason: str | None
    parent_snapshot_id: str | None
    hostname: str
    created_at: datetime
    updated_at: datetime
    state_since: datetime
    last_activity_at: datetime
    metering: Metering
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: _Obj) -> SessionInfo:
        raw = {k: v for k, v in o.items() if k != "agentToken"}
        return cls(
            id=o["id"],
            tenant_id=o["tenantId"],
            state=o["state"],
            backend=o["backend"],
            objective=o.get("objective"),
            settings=SessionSettings.from_wire(o["settings"]),
            metadata=dict(o.get("metadata") or {}),
            failure_reason=o.get("failureReason"),
            parent_snapshot_id=o.get("parentSnapshotId"),
            hostname=o["hostname"],
            created_at=_time(o["createdAt"]),
            updated_at=_time(o["updatedAt"]),
            state_since=_time(o["stateSince"]),
            last_activity_at=_time(o["lastActivityAt"]),
            metering=Metering.from_wire(o["metering"]),
            raw=raw,
        )


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    tenant_id: str
    session_id: str
    name: str | None
    kind: Literal["named", "hibernation"]
    backend: str
    size_bytes: int
    created_at: datetime
    #: Settings of the source session; fork branches inherit them.
    settings: SessionSettings
    raw: dict[str, Any] = _raw()

    @property
    def id(self) -> str:
        return self.snapshot_id

    @classmethod
    def from_wire(cls, o: _Obj) -> Snapshot:
        return cls(
            snapshot_id=o["snapshotId"],
            tenant_id=o["tenantId"],
            session_id=o["sessionId"],
            name=o.get("name"),
            kind=o["kind"],
            backend=o["backend"],
            size_bytes=o["sizeBytes"],
            created_at=_time(o["createdAt"]),
            settings=SessionSettings.from_wire(o["settings"]),
            raw=dict(o),
        )


@dataclass(frozen=True)
class Tenant:
    id: str
    name: str
    created_at: datetime

    @classmethod
    def from_wire(cls, o: _Obj) -> Tenant:
        return cls(id=o["id"], name=o["name"], created_at=_time(o["createdAt"]))


@dataclass(frozen=True)
class CreatedTenant(Tenant):
    #: The tenant's API key: shown once, by create.
    api_key: str = field(default="", repr=False)

    @classmethod
    def from_wire(cls, o: _Obj) -> CreatedTenant:
        return cls(id=o["id"], name=o["name"], created_at=_time(o["createdAt"]), api_key=o["apiKey"])


@dataclass(frozen=True)
class Principal:
    kind: Literal["root", "operator", "agent", "system", "anonymous"]
    #: Tenant id for operators, session id for agents, 'root' or 'system'.
    id: str
    tenant_id: str | None


@dataclass(frozen=True)
class AuditEntry:
    seq: int
    ts: datetime
    ts_ms: int
    tenant_id: str | None
    session_id: str | None
    principal: Principal
    action: str
    outcome: str
    data: dict[str, Any]
    prev_hash: str
    hash: str

    @classmethod
    def from_wire(cls, o: _Obj) -> AuditEntry:
        p = o["principal"]
        return cls(
            seq=o["seq"],
            ts=_time(o["ts"]),
            ts_ms=o["tsMs"],
            tenant_id=o.get("tenantId"),
            session_id=o.get("sessionId"),
            principal=Principal(kind=p["kind"], id=p["id"], tenant_id=p.get("tenantId")),
            action=o["action"],
            outcome=o["outcome"],
            data=dict(o.get("data") or {}),
            prev_hash=o["prevHash"],
            hash=o["hash"],
        )


@dataclass(frozen=True)
class AuditVerification:
    ok: bool
    entries: int
    head_hash: str | None = None
    first_bad_seq: int | None = None
    problem: Literal["edited", "removed", "reordered", "broken_link"] | None = None

    @classmethod
    def from_wire(cls, o: _Obj) -> AuditVerification:
        return cls(ok=o["ok"], entries=o["entries"], head_hash=o.get("headHash"), first_bad_seq=o.get("firstBadSeq"), problem=o.get("problem"))


@dataclass(frozen=True)
class Health:
    ok: bool
    backends: dict[str, dict[str, Any]]
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: _Obj) -> Health:
        return cls(ok=o["ok"], backends=dict(o.get("backends") or {}), raw=dict(o))


@dataclass(frozen=True)
class FileEntry:
    name: str
    type: Literal["file", "dir", "symlink", "other"]
    #: Bytes.
    size: int
    #: Permission bits, e.g. 0o644.
    mode: int
    mtime: datetime

    @classmethod
    def from_wire(cls, o: _Obj) -> FileEntry:
        return cls(name=o["name"], type=o["type"], size=o["size"], mode=o["mode"], mtime=_ms(o["mtimeMs"]))


@dataclass(frozen=True)
class FileStat(FileEntry):
    path: str = ""

    @classmethod
    def from_wire(cls, o: _Obj) -> FileStat:
        return cls(name=o["name"], type=o["type"], size=o["size"], mode=o["mode"], mtime=_ms(o["mtimeMs"]), path=o["path"])


@dataclass(frozen=True)
class FileWrite:
    path: str
    #: Bytes written.
    bytes: int

    @classmethod
    def from_wire(cls, o: _Obj) -> FileWrite:
        return cls(path=o["path"], bytes=o["bytes"])


@dataclass(frozen=True)
class ExecEvent:
    """One chunk of a command's output, in the order the command wrote it."""

    type: Literal["stdout", "stderr"]
    data: bytes

    @property
    def text(self) -> str:
        """The chunk decoded as UTF-8 (a multi-byte character split across chunks shows as U+FFFD)."""
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class ExecResult:
    #: Exit code; 128+signal when killed by one.
    exit_code: int
    #: Signal number when killed by one, else None.
    signal: int | None
    #: True when the command's ``timeout`` elapsed and it was killed for it.
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class RunResult(ExecResult):
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")


@dataclass(frozen=True)
class KillResult:
    exec_id: str
    signal: int


@dataclass(frozen=True)
class ProcessInfo:
    """A background command's record (``processes.list``, ``BackgroundProcess.info``)."""

    exec_id: str
    #: The pid inside the sandbox.
    pid: int
    argv: list[str]
    state: Literal["running", "exited"]
    #: None while running.
    exit_code: int | None
    signal: int | None
    timed_out: bool
    #: The sandbox's clock.
    started_at: datetime
    ended_at: datetime | None
    #: Bytes written to each stream since the start (the sandbox keeps the last 1 MiB of each).
    stdout_bytes: int
    stderr_bytes: int
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: _Obj) -> ProcessInfo:
        return cls(
            exec_id=o["execId"],
            pid=o["pid"],
            argv=list(o["argv"]),
            state=o["state"],
            exit_code=o.get("exitCode"),
            signal=o.get("signal"),
            timed_out=bool(o.get("timedOut")),
            started_at=_time(o["startedAt"]),
            ended_at=parse_time(o.get("endedAt")),
            stdout_bytes=o["stdoutBytes"],
            stderr_bytes=o["stderrBytes"],
            raw=dict(o),
        )


@dataclass(frozen=True)
class ProcessOutput(ExecEvent):
    """A chunk of a background command's output: ``offset`` is the stream offset of ``data[0]``;
    ``output(offset=cursor)`` continues right after it."""

    offset: int = 0
    cursor: str = ""


@dataclass(frozen=True)
class ProcessExit(ExecResult):
    """The last event of a background command's output: how it ended."""

    type: Literal["exit"] = "exit"


@dataclass(frozen=True)
class ProcessKill:
    exec_id: str
    signal: int
    #: False when the command had already ended (nothing was signalled).
    signalled: bool


@dataclass(frozen=True)
class StdinWrite:
    #: Bytes this request wrote to the command's stdin.
    bytes: int
    closed: bool


@dataclass(frozen=True)
class Tool:
    """A tool as a session sees it (``tools.list``)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    risk: Literal["read", "write", "irreversible"]

    @classmethod
    def from_wire(cls, o: _Obj) -> Tool:
        return cls(name=o["name"], description=o["description"], input_schema=o["inputSchema"], output_schema=o["outputSchema"], risk=o["risk"])


@dataclass(frozen=True)
class ToolDefinition:
    """A tenant's tool (``tools.definitions``), built-ins included."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    risk: Literal["read", "write", "irreversible"]
    executor: dict[str, Any]
    builtin: bool
    updated_at: datetime | None
    updated_by: str | None
    path_args: list[str] | None = None
    opaque_args: list[str] | None = None

    @classmethod
    def from_wire(cls, o: _Obj) -> ToolDefinition:
        return cls(
            name=o["name"],
            description=o["description"],
            input_schema=o["inputSchema"],
            output_schema=o["outputSchema"],
            risk=o["risk"],
            executor=o["executor"],
            builtin=o["builtin"],
            updated_at=parse_time(o.get("updatedAt")),
            updated_by=o.get("updatedBy"),
            path_args=o.get("pathArgs"),
            opaque_args=o.get("opaqueArgs"),
        )


@dataclass(frozen=True)
class CallResult:
    """The gate's answer to a tool call: ``decision`` is ``allow`` (``result`` holds the tool's output),
    ``deny`` (``stage``, ``code``, ``reason``, ``retryable``) or ``pending`` (``approval_id``)."""

    decision: Literal["allow", "deny", "pending"]
    result: Json = None
    approval_id: str | None = None
    stage: str | None = None
    code: str | None = None
    reason: str | None = None
    #: On a deny: True when the same call may succeed later unchanged (``human_control``: wait for the hand-back).
    retryable: bool = False

    @classmethod
    def from_wire(cls, o: _Obj) -> CallResult:
        return cls(
            decision=o["decision"],
            result=o.get("result"),
            approval_id=o.get("approvalId"),
            stage=o.get("stage"),
            code=o.get("code"),
            reason=o.get("reason"),
            retryable=o.get("retryable") is True,
        )


@dataclass(frozen=True)
class Approval:
    approval_id: str
    tenant_id: str
    session_id: str
    tool: str
    #: Exactly the arguments that run if approved.
    args: dict[str, Any]
    args_digest: str
    step: str | None
    status: ApprovalStatus
    policy_ids: list[str]
    requested_by: str
    created_at: datetime
    expires_at: datetime | None
    decided_by: str | None
    decided_at: datetime | None
    reason: str | None
    used_at: datetime | None
    #: The call's answer once it ran (or was refused for good).
    result: CallResult | None

    @property
    def id(self) -> str:
        return self.approval_id

    @classmethod
    def from_wire(cls, o: _Obj) -> Approval:
        return cls(
            approval_id=o["approvalId"],
            tenant_id=o["tenantId"],
            session_id=o["sessionId"],
            tool=o["tool"],
            args=dict(o.get("args") or {}),
            args_digest=o["argsDigest"],
            step=o.get("step"),
            status=o["status"],
            policy_ids=list(o.get("policyIds") or []),
            requested_by=o["requestedBy"],
            created_at=_time(o["createdAt"]),
            expires_at=parse_time(o.get("expiresAt")),
            decided_by=o.get("decidedBy"),
            decided_at=parse_time(o.get("decidedAt")),
            reason=o.get("reason"),
            used_at=parse_time(o.get("usedAt")),
            result=CallResult.from_wire(o["result"]) if o.get("result") else None,
        )


@dataclass(frozen=True)
class Policy:
    tenant_id: str
    text: str
    #: 0 = the default policy (never set).
    version: int
    is_default: bool
    updated_at: datetime | None
    updated_by: str | None
    digest: str
    warnings: list[str]

    @classmethod
    def from_wire(cls, o: _Obj) -> Policy:
        return cls(
            tenant_id=o["tenantId"],
            text=o["text"],
            version=o["version"],
            is_default=o["isDefault"],
            updated_at=parse_time(o.get("updatedAt")),
            updated_by=o.get("updatedBy"),
            digest=o["digest"],
            warnings=list(o.get("warnings") or []),
        )


@dataclass(frozen=True)
class Plan:
    session_id: str
    #: ``{objective, steps: [{id, tool, arguments, repeatable?}]}``, or None when no plan is set.
    plan: dict[str, Any] | None
    #: ``{cursor, consumed}``: progress through the steps.
    state: dict[str, Any] | None
    set_at: datetime | None
    set_by: str | None

    @classmethod
    def from_wire(cls, o: _Obj) -> Plan:
        return cls(session_id=o["sessionId"], plan=o.get("plan"), state=o.get("state"), set_at=parse_time(o.get("setAt")), set_by=o.get("setBy"))


@dataclass(frozen=True)
class Breaker:
    failures: int
    per_minute: int
    open: bool
    trip: str | None
    reason: str | None
    opened_at: datetime | None
    streak_failures: int


@dataclass(frozen=True)
class Gate:
    session_id: str
    tenant_id: str
    tools: list[str]
    http_allow: list[str]
    approval_ttl_s: int
    #: The egress allow-list (the same list as ``http_allow``) and the range allowances.
    egress_allow: list[str]
    egress_allow_cidr: list[str]
    breaker: Breaker
    paused_by_breaker: bool
    calls: int

    @classmethod
    def from_wire(cls, o: _Obj) -> Gate:
        b = o["breaker"]
        return cls(
            session_id=o["sessionId"],
            tenant_id=o["tenantId"],
            tools=list(o["tools"]),
            http_allow=list(o["httpAllow"]),
            approval_ttl_s=o["approvalTtlS"],
            egress_allow=list(o.get("egressAllow", o["httpAllow"])),
            egress_allow_cidr=list(o.get("egressAllowCidr", [])),
            breaker=Breaker(
                failures=b["failures"],
                per_minute=b["perMinute"],
                open=b["open"],
                trip=b.get("trip"),
                reason=b.get("reason"),
                opened_at=parse_time(b.get("openedAt")),
                streak_failures=b["streakFailures"],
            ),
            paused_by_breaker=o["pausedByBreaker"],
            calls=o["calls"],
        )


def b64decode(s: str) -> bytes:
    return base64.b64decode(s)
