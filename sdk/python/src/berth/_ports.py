"""Ports of a session (issue 9 §3): servers listening on loopback inside the sandbox, reached through the
Berth server's authenticated proxy, or through a port link: a signed, expiring URL a browser opens with
no token (``link``), listed with ``links`` and ended with ``revoke_link``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Optional, Union

from ._errors import InvalidArgumentError
from ._models import _time, parse_time
from ._options import DEFAULT, Timeout
from ._transport import AsyncTransport, Req, SyncTransport, seg

PortLinkState = Literal["active", "expired", "revoked", "ended"]


def _check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or port < 1 or port > 65535:
        raise InvalidArgumentError(f"port: must be an integer from 1 to 65535, got {port!r}")
    return port


@dataclass(frozen=True)
class PortLink:
    """A port link. ``url`` and ``prefix`` (the path an app behind it sees as ``X-Forwarded-Prefix``,
    ``/p/<token>``) are set only on the answer to ``link`` (the server keeps only the token's hash);
    ``state`` is ``active``, ``expired``, ``revoked`` or ``ended`` (session gone); times are UTC;
    ``created_by`` is ``kind:id`` of its creator. ``raw``: the server's JSON."""

    link_id: str
    session_id: str
    port: int
    label: Optional[str]
    state: PortLinkState
    created_at: datetime
    expires_at: datetime
    revoked_at: Optional[datetime]
    created_by: str
    url: Optional[str] = None
    prefix: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> "PortLink":
        return cls(
            link_id=o["linkId"],
            session_id=o["sessionId"],
            port=o["port"],
            label=o["label"],
            state=o["state"],
            created_at=_time(o["createdAt"]),
            expires_at=_time(o["expiresAt"]),
            revoked_at=parse_time(o["revokedAt"]),
            created_by=o["createdBy"],
            url=o.get("url"),
            prefix=o.get("prefix"),
            raw=dict(o),
        )



def _links_path(session_id: str) -> str:
    return f"/sessions/{seg(session_id)}/port-links"


def _link_req(session_id: str, port: int, ttl_s: Optional[int], label: Optional[str]) -> Req[PortLink]:
    _check_port(port)
    if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1 or ttl_s > 604_800):
        raise InvalidArgumentError(f"ttl_s: must be an integer number of seconds from 1 to 604800 (7 days), got {ttl_s!r}")
    body: dict[str, Any] = {"port": port}
    if ttl_s is not None:
        body["ttlS"] = ttl_s
    if label is not None:
        body["label"] = label
    return Req("POST", _links_path(session_id), PortLink.from_wire, json=body)


def _list_req(session_id: str) -> Req[list[PortLink]]:
    return Req("GET", _links_path(session_id), lambda o: [PortLink.from_wire(x) for x in o["links"]])


def _revoke_req(session_id: str, link_id: str) -> Req[PortLink]:
    return Req("DELETE", f"{_links_path(session_id)}/{seg(link_id)}", PortLink.from_wire)


class _PortsBase:
    def __init__(self, t: Union[SyncTransport, AsyncTransport], session_id: str) -> None:
        self._opts = t.opts
        self._id = session_id

    def url(self, port: int) -> str:
        """The proxy URL of ``port``, ending in ``/``: ``url + "path"`` reaches ``/path`` of the server on
        127.0.0.1:port inside the sandbox (``X-Forwarded-Prefix`` is set). Send the bearer token
        (``Authorization: Bearer …``); WebSocket upgrades go through the same URL (``ws://``)."""
        _check_port(port)
        return f"{self._opts.url}/v1/sessions/{seg(self._id)}/ports/{port}/"


class Ports(_PortsBase):
    """``session.ports``: proxy addresses and port links of the servers inside the sandbox."""

    def __init__(self, t: SyncTransport, session_id: str) -> None:
        super().__init__(t, session_id)
        self._t = t

    def link(self, port: int, *, ttl_s: Optional[int] = None, label: Optional[str] = None, timeout: Timeout = DEFAULT) -> PortLink:
        """A signed, expiring link to ``port`` (``.url``, shown this once): anyone holding it reaches the
        server on 127.0.0.1:port in the sandbox with no token (HTTP and WebSocket) until it expires
        (``ttl_s`` seconds, default 3600, 1 to 604800), is revoked or the session ends; then it answers 404.
        ``label``: for people reading ``links()`` (at most 200 characters). Operator calls: an agent token
        gets ForbiddenError."""
        return self._t.call(_link_req(self._id, port, ttl_s, label), timeout)

    def links(self, *, timeout: Timeout = DEFAULT) -> list[PortLink]:
        """Every link of the session, in any state (without URLs)."""
        return self._t.call(_list_req(self._id), timeout)

    def revoke_link(self, link_id: str, *, timeout: Timeout = DEFAULT) -> PortLink:
        """Ends a link: from now on it answers 404. Idempotent."""
        return self._t.call(_revoke_req(self._id, link_id), timeout)


class AsyncPorts(_PortsBase):
    """``session.ports`` of an async session: as :class:`Ports`, awaited."""

    def __init__(self, t: AsyncTransport, session_id: str) -> None:
        super().__init__(t, session_id)
        self._t = t

    async def link(self, port: int, *, ttl_s: Optional[int] = None, label: Optional[str] = None, timeout: Timeout = DEFAULT) -> PortLink:
        """See :meth:`Ports.link`."""
        return await self._t.call(_link_req(self._id, port, ttl_s, label), timeout)

    async def links(self, *, timeout: Timeout = DEFAULT) -> list[PortLink]:
        """See :meth:`Ports.links`."""
        return await self._t.call(_list_req(self._id), timeout)

    async def revoke_link(self, link_id: str, *, timeout: Timeout = DEFAULT) -> PortLink:
        """See :meth:`Ports.revoke_link`."""
        return await self._t.call(_revoke_req(self._id, link_id), timeout)
