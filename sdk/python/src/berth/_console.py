"""The web console's parts of the API, usable by any client (as the TypeScript SDK's ``ControlApi`` and
``ConsoleApi``): control leases (take a session over from its agent, hand it back), sign-in links, watch-only
links to one session, policy validation and the live stream of audit entries.

    client.control.take(session_id)       # the agent's tool calls now answer human_control
    client.control.release(session_id)    # the agent's next call runs
    print(client.console.link().url)      # a one-time console sign-in link, valid 60 s

The console's cookie sign-in (``POST /console/signin``) is a browser's business and is not wrapped here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncGenerator, Generator, Literal, Optional

from ._errors import BerthError
from ._models import AuditEntry, _time, parse_time
from ._options import DEFAULT, Timeout
from ._transport import AsyncTransport, Req, SyncTransport, map_exception, seg

WatchLinkState = Literal["active", "expired", "revoked"]


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)



@dataclass(frozen=True)
class ControlLease:
    """A session's control lease (``control.get``/``take``/``release``). ``held`` False: nobody holds it
    and the other fields are None. ``holder`` names who does (``root:root``, ``operator:ten_…``, or through
    the console ``operator:ten_… (cs_…)``); the lease lapses at ``expires_at`` unless its holder acts again
    (10 minutes after ``last_activity_at``)."""

    session_id: str
    held: bool
    holder: Optional[str]
    since: Optional[datetime]
    last_activity_at: Optional[datetime]
    expires_at: Optional[datetime]
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> ControlLease:
        return cls(
            session_id=o["sessionId"],
            held=o["held"],
            holder=o["holder"],
            since=parse_time(o["since"]),
            last_activity_at=parse_time(o["lastActivityAt"]),
            expires_at=parse_time(o["expiresAt"]),
            raw=dict(o),
        )


@dataclass(frozen=True)
class ConsoleLink:
    """A one-time console sign-in link: open ``url`` once before ``expires_at`` (60 s). The code sits in the
    URL's fragment, which a browser never sends to a server or in a Referer."""

    url: str
    expires_at: datetime
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> ConsoleLink:
        return cls(url=o["url"], expires_at=_time(o["expiresAt"]), raw=dict(o))


@dataclass(frozen=True)
class CreatedWatchLink:
    """The answer to ``console.watch_link``: ``url`` opens the console read-only on the one session, for
    whoever holds it, until ``expires_at`` or a revoke. Its token sits in the fragment and is shown only
    here (the server keeps its hash): share the URL, it cannot be read back."""

    link_id: str
    url: str
    expires_at: datetime
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> CreatedWatchLink:
        return cls(link_id=o["linkId"], url=o["url"], expires_at=_time(o["expiresAt"]), raw=dict(o))


@dataclass(frozen=True)
class WatchLink:
    """A watch-only link as ``watch_links`` lists it (without its URL). ``state``: ``active`` until it
    expires or is revoked; ``created_by`` is ``kind:id`` of the operator who made it."""

    link_id: str
    session_id: str
    label: Optional[str]
    created_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: Optional[datetime]
    state: WatchLinkState
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> WatchLink:
        return cls(
            link_id=o["linkId"],
            session_id=o["sessionId"],
            label=o["label"],
            created_by=o["createdBy"],
            created_at=_time(o["createdAt"]),
            expires_at=_time(o["expiresAt"]),
            revoked_at=parse_time(o["revokedAt"]),
            state=o["state"],
            raw=dict(o),
        )


@dataclass(frozen=True)
class ConsoleMe:
    """Who the caller is to the console (``console.me``): ``principal`` (``kind:id``), ``kind``,
    ``tenant_id``; ``handle`` is the console session's ``cs_…`` ("" for a bearer token, which has none);
    ``idle_logoff_s`` the console's idle sign-out, seconds; ``watch_session_id`` the one session a watch-only
    link's viewer may see, else None."""

    principal: str
    kind: str
    tenant_id: Optional[str]
    handle: str
    idle_logoff_s: int
    watch_session_id: Optional[str]
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> ConsoleMe:
        return cls(
            principal=o["principal"],
            kind=o["kind"],
            tenant_id=o["tenantId"],
            handle=o["handle"],
            idle_logoff_s=o["idleLogoffS"],
            watch_session_id=o["watchSessionId"],
            raw=dict(o),
        )


@dataclass(frozen=True)
class PolicyValidation:
    """``console.validate_policy``: ``ok`` False with ``errors`` when ``policy.set`` would refuse the text."""

    ok: bool
    errors: list[str]
    warnings: list[str]

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> PolicyValidation:
        return cls(ok=o["ok"], errors=list(o["errors"]), warnings=list(o["warnings"]))


# ---- requests (shared by the sync and async APIs) ----


def _ses(session_id: str) -> str:
    return f"/sessions/{seg(session_id)}"


def _get_control(session_id: str) -> Req[ControlLease]:
    return Req("GET", f"{_ses(session_id)}/control", ControlLease.from_wire)


def _take_control(session_id: str) -> Req[ControlLease]:
    return Req("POST", f"{_ses(session_id)}/control", ControlLease.from_wire, json={})


def _release_control(session_id: str, force: bool) -> Req[ControlLease]:
    return Req("DELETE", f"{_ses(session_id)}/control", ControlLease.from_wire, query={"force": True if force else None})


def _sign_in_link(base_url: Optional[str]) -> Req[ConsoleLink]:
    return Req("POST", "/console/links", ConsoleLink.from_wire, json={} if base_url is None else {"baseUrl": base_url})


def _create_watch_link(session_id: str, ttl_s: Optional[int], label: Optional[str], base_url: Optional[str]) -> Req[CreatedWatchLink]:
    body = {k: v for k, v in (("ttlS", ttl_s), ("label", label), ("baseUrl", base_url)) if v is not None}
    return Req("POST", f"{_ses(session_id)}/watch-links", CreatedWatchLink.from_wire, json=body)


def _list_watch_links(session_id: str) -> Req[list[WatchLink]]:
    return Req("GET", f"{_ses(session_id)}/watch-links", lambda o: [WatchLink.from_wire(x) for x in o["links"]])


def _revoke_watch_link(session_id: str, link_id: str) -> Req[WatchLink]:
    return Req("DELETE", f"{_ses(session_id)}/watch-links/{seg(link_id)}", WatchLink.from_wire)


def _me() -> Req[ConsoleMe]:
    return Req("GET", "/console/me", ConsoleMe.from_wire)


def _validate_policy(text: str, tenant_id: Optional[str]) -> Req[PolicyValidation]:
    return Req(
        "POST", "/policy/validate", PolicyValidation.from_wire, query={"tenantId": tenant_id}, content=text.encode("utf-8"), content_type="text/plain; charset=utf-8"
    )


class _AuditEvents:
    """Reads ``GET /events`` (text/event-stream) line by line: the data of each ``audit`` event is an
    AuditEntry; the ``ready`` event and ``: ping`` comments are skipped."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []

    def line(self, raw: str) -> AuditEntry | None:
        text = raw.rstrip("\r\n")  # httpx 0.23 keeps the line's end, newer ones drop it
        if text == "":
            event, data = self._event, self._data
            self._event, self._data = "message", []
            if event != "audit" or not data:
                return None
            try:
                o = json.loads("\n".join(data))
            except ValueError:
                raise BerthError("GET /events: an audit event whose data is not JSON", code="internal") from None
            return AuditEntry.from_wire(o)
        if text.startswith(":"):
            return None
        name, _, value = text.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value.strip()
        elif name == "data":
            self._data.append(value)
        return None


# ---- the sync APIs ----


class ControlApi:
    """``client.control``: control leases, the console's "Take control". While someone holds a session's
    lease, the gate refuses its agent's tool calls with code ``human_control`` (``retryable``: the agent
    should wait and call again unchanged); operators' own calls still run. Operator calls (root, or an
    operator of the session's tenant); an agent token gets ForbiddenError."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def get(self, session_id: str, *, timeout: Timeout = DEFAULT) -> ControlLease:
        """Who holds the session's lease, if anyone."""
        return self._t.call(_get_control(session_id), timeout)

    def take(self, session_id: str, *, timeout: Timeout = DEFAULT) -> ControlLease:
        """Takes the lease; taking it again renews it. ConflictError (``details["holder"]``) while someone
        else holds it, InvalidStateError on a terminated or failed session."""
        return self._t.call(_take_control(session_id), timeout)

    def release(self, session_id: str, *, force: bool = False, timeout: Timeout = DEFAULT) -> ControlLease:
        """Hands back (nothing happens when nobody holds it). Someone else's lease: ConflictError unless
        ``force`` (default False), which ends it."""
        return self._t.call(_release_control(session_id, force), timeout)


class ConsoleApi:
    """``client.console``: sign-in links, watch-only links, who am I, policy validation and the live events."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def link(self, *, base_url: Optional[str] = None, timeout: Timeout = DEFAULT) -> ConsoleLink:
        """A one-time console sign-in link for this client's token, valid 60 s (``berth console``).
        ``base_url``: the console's address to put in it (default: the server's URL this client uses).
        ForbiddenError for an agent token."""
        return self._t.call(_sign_in_link(base_url), timeout)

    def watch_link(
        self, session_id: str, *, ttl_s: Optional[int] = None, label: Optional[str] = None, base_url: Optional[str] = None, timeout: Timeout = DEFAULT
    ) -> CreatedWatchLink:
        """A watch-only link to one session (TypeScript: ``createWatchLink``): whoever opens its ``url``
        sees that session's state, plan, tool-call timeline and terminal read-only, and nothing else, for
        ``ttl_s`` seconds (default 3600; 60 to 2592000, else InvalidArgumentError) unless revoked.
        ``label``: shown in the list (at most 200 characters). ``base_url`` as for :meth:`link`."""
        return self._t.call(_create_watch_link(session_id, ttl_s, label, base_url), timeout)

    def watch_links(self, session_id: str, *, timeout: Timeout = DEFAULT) -> list[WatchLink]:
        """The session's watch links (active, expired and revoked), oldest first, without their URLs."""
        return self._t.call(_list_watch_links(session_id), timeout)

    def revoke_watch_link(self, session_id: str, link_id: str, *, timeout: Timeout = DEFAULT) -> WatchLink:
        """Revokes a watch link: it stops working, and the consoles opened through it end at their next request."""
        return self._t.call(_revoke_watch_link(session_id, link_id), timeout)

    def me(self, *, timeout: Timeout = DEFAULT) -> ConsoleMe:
        """Who this client's token is to the console."""
        return self._t.call(_me(), timeout)

    def validate_policy(self, text: str, *, tenant_id: Optional[str] = None, timeout: Timeout = DEFAULT) -> PolicyValidation:
        """Checks Cedar text as ``policy.set`` would (against the tenant's tools), without saving it: a
        policy that would be refused comes back with ``ok`` False and its ``errors``."""
        return self._t.call(_validate_policy(text, tenant_id), timeout)

    def events(self, *, after: Optional[int] = None, timeout: Timeout = DEFAULT) -> Generator[AuditEntry, None, None]:
        """The audit entries the caller may see, as they are appended: those after seq ``after`` (default:
        from when the stream opens), then each new one, until the loop is left (which closes the stream).
        ``timeout``: seconds without a byte (default none; the server sends a ping every 15 s)."""
        res = self._t.open("GET", "/events", query={"after": after}, timeout=timeout, long=True)
        reader = _AuditEvents()
        try:
            for line in res.iter_lines():
                entry = reader.line(line)
                if entry is not None:
                    yield entry
        except BerthError:
            raise
        except Exception as e:
            raise map_exception(e, self._t.opts, "GET /events") from e
        finally:
            res.close()


# ---- the async APIs ----


class AsyncControlApi:
    """``client.control`` of :class:`berth.AsyncBerth`: as :class:`ControlApi`, awaited."""

    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def get(self, session_id: str, *, timeout: Timeout = DEFAULT) -> ControlLease:
        """See :meth:`ControlApi.get`."""
        return await self._t.call(_get_control(session_id), timeout)

    async def take(self, session_id: str, *, timeout: Timeout = DEFAULT) -> ControlLease:
        """See :meth:`ControlApi.take`."""
        return await self._t.call(_take_control(session_id), timeout)

    async def release(self, session_id: str, *, force: bool = False, timeout: Timeout = DEFAULT) -> ControlLease:
        """See :meth:`ControlApi.release`."""
        return await self._t.call(_release_control(session_id, force), timeout)


class AsyncConsoleApi:
    """``client.console`` of :class:`berth.AsyncBerth`: as :class:`ConsoleApi`, awaited."""

    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def link(self, *, base_url: Optional[str] = None, timeout: Timeout = DEFAULT) -> ConsoleLink:
        """See :meth:`ConsoleApi.link`."""
        return await self._t.call(_sign_in_link(base_url), timeout)

    async def watch_link(
        self, session_id: str, *, ttl_s: Optional[int] = None, label: Optional[str] = None, base_url: Optional[str] = None, timeout: Timeout = DEFAULT
    ) -> CreatedWatchLink:
        """See :meth:`ConsoleApi.watch_link`."""
        return await self._t.call(_create_watch_link(session_id, ttl_s, label, base_url), timeout)

    async def watch_links(self, session_id: str, *, timeout: Timeout = DEFAULT) -> list[WatchLink]:
        """See :meth:`ConsoleApi.watch_links`."""
        return await self._t.call(_list_watch_links(session_id), timeout)

    async def revoke_watch_link(self, session_id: str, link_id: str, *, timeout: Timeout = DEFAULT) -> WatchLink:
        """See :meth:`ConsoleApi.revoke_watch_link`."""
        return await self._t.call(_revoke_watch_link(session_id, link_id), timeout)

    async def me(self, *, timeout: Timeout = DEFAULT) -> ConsoleMe:
        """See :meth:`ConsoleApi.me`."""
        return await self._t.call(_me(), timeout)

    async def validate_policy(self, text: str, *, tenant_id: Optional[str] = None, timeout: Timeout = DEFAULT) -> PolicyValidation:
        """See :meth:`ConsoleApi.validate_policy`."""
        return await self._t.call(_validate_policy(text, tenant_id), timeout)

    async def events(self, *, after: Optional[int] = None, timeout: Timeout = DEFAULT) -> AsyncGenerator[AuditEntry, None]:
        """See :meth:`ConsoleApi.events`. Leaving an ``async for`` early closes the stream only when the
        generator is closed: wrap it in ``contextlib.aclosing`` (or call ``aclose()``)."""
        res = await self._t.open("GET", "/events", query={"after": after}, timeout=timeout, long=True)
        reader = _AuditEvents()
        try:
            async for line in res.aiter_lines():
                entry = reader.line(line)
                if entry is not None:
                    yield entry
        except BerthError:
            raise
        except Exception as e:
            raise map_exception(e, self._t.opts, "GET /events") from e
        finally:
            await res.aclose()
