"""The sync client. ``Berth(url, token)`` or ``Berth.from_env()``; every method takes ``timeout=`` (seconds
without progress, None for no limit; the client's default for short calls, none for long ones)."""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Sequence

import httpx

from . import _requests as R
from ._models import (
    Approval,
    AuditEntry,
    AuditVerification,
    CallResult,
    CreatedTenant,
    Gate,
    Health,
    Plan,
    Policy,
    Snapshot,
    Tenant,
    Tool,
    ToolDefinition,
)
from ._console import ConsoleApi, ControlApi
from ._options import DEFAULT, ClientOptions, Timeout, resolve_env, resolve_options
from ._session import Session
from ._transport import SyncTransport


class Berth:
    """A Berth server. Thread-safe: one client may serve many threads (httpx's connection pool).

    ``url``: default http://127.0.0.1:7070. ``token``: the root key, a tenant API key or a session's agent
    token; without one every call but ``health`` raises UnauthenticatedError. ``timeout``: seconds a short
    call may go without progress, default 120, None for no limit; streams and the verbs that move machines
    (create, hibernate, wake, snapshot, fork, terminate, approve, tool calls) have no default limit, and
    any call takes its own ``timeout=``. ``http_client``: an httpx.Client to use (not closed by close())."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: Timeout = DEFAULT,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.options: ClientOptions = resolve_options(url, token, timeout)
        t = SyncTransport(self.options, http_client)
        self._t = t
        self.sessions = SessionsApi(t)
        self.snapshots = SnapshotsApi(t)
        self.tenants = TenantsApi(t)
        self.audit = AuditApi(t)
        #: The tool gate: tools and calls (agent tokens too), approvals, policy, plans, gate settings.
        self.tools = ToolsApi(t)
        self.approvals = ApprovalsApi(t)
        self.policy = PolicyApi(t)
        self.plans = PlansApi(t)
        self.gate = GateApi(t)
        #: Control leases: take a session over from its agent and hand it back (the console's "Take control").
        self.control = ControlApi(t)
        #: Sign-in links, watch-only links, who am I, policy validation and the live event stream.
        self.console = ConsoleApi(t)

    @classmethod
    def from_env(cls, *, url: str | None = None, token: str | None = None, timeout: Timeout = DEFAULT) -> Berth:
        """BERTH_URL; BERTH_TOKEN, else $BERTH_DATA/root.key (BERTH_DATA default ./.berth). Arguments win."""
        e = resolve_env()
        return cls(url or e.url, token or e.token, timeout=timeout)

    def health(self, *, timeout: Timeout = DEFAULT) -> Health:
        """GET /healthz (no token needed)."""
        return self._t.call(R.health(), timeout)

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Berth:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SessionsApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def create(
        self,
        *,
        objective: str | None = None,
        memory_mb: int | None = None,
        cpus: float | None = None,
        idle_timeout_s: int | None = None,
        env: Mapping[str, str] | None = None,
        backend: str | None = None,
        metadata: Mapping[str, str] | None = None,
        tenant_id: str | None = None,
        template: str | None = None,
        egress_allow: Sequence[str] | None = None,
        egress_allow_cidr: Sequence[str] | None = None,
        desktop: bool | Mapping[str, int] | None = None,
        disk_mb: int | None = None,
        timeout: Timeout = DEFAULT,
    ) -> Session:
        """Starts a machine and returns once it runs; the handle carries the agent token.

        ``memory_mb`` 64..16384 (default 512), ``cpus`` 0.1..64 (default 1), ``idle_timeout_s`` seconds
        idle before it hibernates (0 = never, the default), ``env`` for every command, ``backend``
        "gvisor" (default) or "qemu", ``metadata`` string labels, ``tenant_id`` (root only), ``egress_allow`` hosts the session may connect
        to through its proxy (``host``, ``*.domain``, ``host:port``, IP, CIDR; default none), ``egress_allow_cidr``
        loopback/private ranges it may reach anyway. ``template`` starts it from that template (its files
        and running processes, a fresh identity); backend, memory, cpus and env then come from the template.
        ``disk_mb``: room for the session's writes, MiB; a writer past it gets ENOSPC (gvisor: default half of
        ``memory_mb``, at most ``memory_mb``; qemu: the disk grown to it, default the image's). ``desktop``: True for a desktop (X display, window manager, VNC; the ``computer`` tool; see
        ``session.desktop``) with the default 1280x800 screen, or ``{"width": W, "height": H}``."""
        req = R.create_session(
            objective=objective,
            memory_mb=memory_mb,
            cpus=cpus,
            idle_timeout_s=idle_timeout_s,
            env=env,
            backend=backend,
            metadata=metadata,
            tenant_id=tenant_id,
            template=template,
            egress_allow=egress_allow,
            egress_allow_cidr=egress_allow_cidr,
            desktop=desktop,
            disk_mb=disk_mb,
        )
        return Session(self._t, self._t.call(req, timeout))

    def get(self, session_id: str, *, timeout: Timeout = DEFAULT) -> Session:
        return Session(self._t, self._t.call(R.get_session(session_id), timeout))

    def list(self, *, states: Iterable[str] | str | None = None, timeout: Timeout = DEFAULT) -> List[Session]:
        """The caller's sessions, optionally only those in ``states`` (e.g. ["running", "paused"])."""
        return [Session(self._t, v) for v in self._t.call(R.list_sessions(states), timeout)]


class SnapshotsApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def get(self, snapshot_id: str, *, timeout: Timeout = DEFAULT) -> Snapshot:
        return self._t.call(R.get_snapshot(snapshot_id), timeout)

    def list(self, *, session_id: str | None = None, timeout: Timeout = DEFAULT) -> List[Snapshot]:
        return self._t.call(R.list_snapshots(session_id), timeout)

    def delete(self, snapshot_id: str, *, timeout: Timeout = DEFAULT) -> None:
        self._t.call(R.delete_snapshot(snapshot_id), timeout)

    def fork(self, snapshot_id: str, count: int | None = None, *, timeout: Timeout = DEFAULT) -> List[Session]:
        """Starts ``count`` (1..64, default 1) independent branches of a snapshot, each with its agent token."""
        return [Session(self._t, v) for v in self._t.call(R.fork(snapshot_id, count), timeout)]


class TenantsApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def create(self, name: str, *, timeout: Timeout = DEFAULT) -> CreatedTenant:
        """Root only. The API key in the result is shown once."""
        return self._t.call(R.create_tenant(name), timeout)

    def list(self, *, timeout: Timeout = DEFAULT) -> List[Tenant]:
        return self._t.call(R.list_tenants(), timeout)


class AuditApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def query(
        self, *, session_id: str | None = None, after_seq: int | None = None, limit: int | None = None, timeout: Timeout = DEFAULT
    ) -> List[AuditEntry]:
        return self._t.call(R.audit_query(session_id, after_seq, limit), timeout)

    def verify(self, *, timeout: Timeout = DEFAULT) -> AuditVerification:
        """Checks the hash chain (root only)."""
        return self._t.call(R.audit_verify(), timeout)


class ToolsApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def list(self, session_id: str, *, timeout: Timeout = DEFAULT) -> List[Tool]:
        """The tools the session has (an agent token sees only what it may call)."""
        return self._t.call(R.list_tools(session_id), timeout)

    def call(
        self, session_id: str, tool: str, args: Mapping[str, Any] | None = None, *, step: str | None = None, check: bool = True, timeout: Timeout = DEFAULT
    ) -> CallResult:
        """Calls a tool through the gate. With ``check`` (the default) a deny raises DeniedError (``stage``,
        ``code``, ``reason``) and a parked call raises ApprovalPending (``approval_id``); with
        ``check=False`` every decision comes back as the CallResult."""
        return self._t.call(R.call_tool(session_id, tool, args, step, check), timeout)

    def define(self, definition: Mapping[str, Any], *, tenant_id: str | None = None, timeout: Timeout = DEFAULT) -> ToolDefinition:
        """Adds or replaces an operator tool of the tenant (the wire's definition object)."""
        return self._t.call(R.define_tool(definition, tenant_id), timeout)

    def definitions(self, *, tenant_id: str | None = None, timeout: Timeout = DEFAULT) -> List[ToolDefinition]:
        return self._t.call(R.tool_definitions(tenant_id), timeout)

    def install(self, session_id: str, tools: Sequence[str], *, timeout: Timeout = DEFAULT) -> Gate:
        """Chooses which tools a session has (default: every built-in)."""
        return self._t.call(R.install_tools(session_id, tools), timeout)


class ApprovalsApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def list(self, *, states: Iterable[str] | str | None = None, session_id: str | None = None, timeout: Timeout = DEFAULT) -> List[Approval]:
        return self._t.call(R.list_approvals(states, session_id), timeout)

    def get(self, session_id: str, approval_id: str, *, timeout: Timeout = DEFAULT) -> Approval:
        """Status and, once run, result of one approval of a session (agent tokens may ask about their own)."""
        return self._t.call(R.get_approval(session_id, approval_id), timeout)

    def approve(self, approval_id: str, *, timeout: Timeout = DEFAULT) -> Approval:
        """Approves and runs the parked call at once; the returned approval holds its result."""
        return self._t.call(R.approve(approval_id), timeout)

    def deny(self, approval_id: str, reason: str, *, timeout: Timeout = DEFAULT) -> Approval:
        return self._t.call(R.deny(approval_id, reason), timeout)


class PolicyApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def get(self, *, tenant_id: str | None = None, timeout: Timeout = DEFAULT) -> Policy:
        return self._t.call(R.get_policy(tenant_id), timeout)

    def set(self, text: str, *, tenant_id: str | None = None, timeout: Timeout = DEFAULT) -> Policy:
        """Replaces the tenant's Cedar policy; one that does not validate raises InvalidArgumentError and changes nothing."""
        return self._t.call(R.set_policy(text, tenant_id), timeout)


class PlansApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def get(self, session_id: str, *, timeout: Timeout = DEFAULT) -> Plan:
        return self._t.call(R.get_plan(session_id), timeout)

    def set(self, session_id: str, objective: str, steps: Sequence[Mapping[str, Any]], *, timeout: Timeout = DEFAULT) -> Plan:
        """Binds the session to a plan, replacing any other. ``steps``: ``{id, tool, arguments, repeatable?}``
        where ``arguments`` is a JSON Schema the call's arguments must match."""
        return self._t.call(R.set_plan(session_id, objective, steps), timeout)

    def clear(self, session_id: str, *, timeout: Timeout = DEFAULT) -> Plan:
        return self._t.call(R.clear_plan(session_id), timeout)


class GateApi:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def get(self, session_id: str, *, timeout: Timeout = DEFAULT) -> Gate:
        return self._t.call(R.get_gate(session_id), timeout)

    def set(
        self,
        session_id: str,
        *,
        breaker_failures: int | None = None,
        breaker_per_minute: int | None = None,
        http_allow: Sequence[str] | None = None,
        approval_ttl_s: int | None = None,
        egress_allow: Sequence[str] | None = None,
        egress_allow_cidr: Sequence[str] | None = None,
        timeout: Timeout = DEFAULT,
    ) -> Gate:
        """Changes the given settings; the others keep their value."""
        req = R.set_gate(
            session_id, breaker_failures=breaker_failures, breaker_per_minute=breaker_per_minute, http_allow=http_allow, approval_ttl_s=approval_ttl_s,
            egress_allow=egress_allow, egress_allow_cidr=egress_allow_cidr,
        )
        return self._t.call(req, timeout)

    def reset_breaker(self, session_id: str, *, timeout: Timeout = DEFAULT) -> Gate:
        """Closes a tripped breaker and resumes the session it paused."""
        return self._t.call(R.reset_breaker(session_id), timeout)
