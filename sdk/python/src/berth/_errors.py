"""The one error root. Every error the SDK raises is a :class:`BerthError` carrying the server's string
``code``, ``message``, ``details`` and the HTTP ``status`` (``None`` when no HTTP answer was involved).
Subclasses exist for the codes callers branch on; any other code is a plain ``BerthError``.

Network failures are :class:`ConnectionError` (also a builtin ``ConnectionError``) and deadlines are
:class:`TimeoutError` (also a builtin ``TimeoutError``): never a raw httpx exception.
"""

from __future__ import annotations

import builtins
from typing import Any, Mapping


class BerthError(Exception):
    """Root of every SDK error. ``code`` is Berth's stable string code (``not_found``, ``invalid_argument``…)."""

    default_code = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code or self.default_code
        self.details: dict[str, Any] = dict(details or {})
        self.status = status
        self.retryable = retryable

    @property
    def field(self) -> str | None:
        """The request field the server named as bad (``details['field']``), if any."""
        f = self.details.get("field")
        return f if isinstance(f, str) else None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, status={self.status!r})"


class InvalidArgumentError(BerthError):
    """400: a field is missing, of the wrong type or out of range (``field`` names it)."""

    default_code = "invalid_argument"


class UnauthenticatedError(BerthError):
    """401: no token, or one the server does not know."""

    default_code = "unauthenticated"


class ForbiddenError(BerthError):
    """403: the token is valid but may not do this (an agent token on an operator route, a tenant on a root one)."""

    default_code = "forbidden"


class NotFoundError(BerthError):
    """404: no such object, or one another tenant owns."""

    default_code = "not_found"


class InvalidStateError(BerthError):
    """409: the object's state forbids the operation (exec in a paused session, pausing twice)."""

    default_code = "invalid_state"


class ConflictError(BerthError):
    """409: a concurrent change or a duplicate."""

    default_code = "conflict"


class PayloadTooLargeError(BerthError):
    """413, or an output/read limit of the SDK (``max_output_bytes``, ``max_bytes``) was exceeded."""

    default_code = "payload_too_large"


class SandboxFailedError(BerthError):
    """503: the sandbox backend failed or died."""

    default_code = "sandbox_failed"


class UnavailableError(BerthError):
    """503: a component the request needs is missing or not ready on the server."""

    default_code = "unavailable"


class ConnectionError(UnavailableError, builtins.ConnectionError):
    """The server could not be reached, or the connection dropped mid-answer (code ``unavailable``)."""


class TimeoutError(BerthError, builtins.TimeoutError):
    """A deadline passed: the client's ``timeout`` (no progress for that long) or the server's (504)."""

    default_code = "timeout"


class OperationCancelled(BerthError):
    """The operation was abandoned: output iteration stopped early, or the server saw the caller leave (499)."""

    default_code = "cancelled"


class ConfigError(BerthError, ValueError):
    """Bad client options (a URL that is not http(s), a negative timeout). Never silently corrected."""

    default_code = "config"


class DeniedError(BerthError):
    """The gate refused a tool call. ``code`` is the deny code (``policy_denied``, ``off_plan``,
    ``approval_denied``…), ``stage`` the gate stage that refused it (``arguments``, ``policy``, ``plan``,
    ``approval``, ``breaker``, ``result``, ``control``) and ``message`` the reason. ``retryable`` is True when
    the same call may pass later unchanged (``human_control``: an operator holds the session's control lease)."""

    default_code = "policy_denied"

    def __init__(self, message: str, *, stage: str | None, code: str | None = None, **kw: Any) -> None:
        super().__init__(message, code=code, **kw)
        self.stage = stage

    @property
    def reason(self) -> str:
        return self.message


class ApprovalPending(BerthError):
    """A tool call is parked until an operator decides. ``approval_id`` names it: approve it with
    ``berth.approvals.approve(approval_id)``, then read the result with ``approvals.get`` or by
    repeating the identical call."""

    default_code = "approval_pending"

    def __init__(self, message: str, *, approval_id: str, session_id: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.approval_id = approval_id
        self.session_id = session_id


_BY_CODE: dict[str, type[BerthError]] = {
    "invalid_argument": InvalidArgumentError,
    "unauthenticated": UnauthenticatedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "invalid_state": InvalidStateError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "sandbox_failed": SandboxFailedError,
    "unavailable": UnavailableError,
    "timeout": TimeoutError,
    "cancelled": OperationCancelled,
    "config": ConfigError,
}

# What a status alone says when the body is not Berth's (a proxy's error page): as the TypeScript SDK reads it.
_CODE_FOR_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "payload_too_large",
    499: "cancelled",
    502: "unavailable",
    503: "unavailable",
    504: "timeout",
}


def from_wire(body: Any, status: int | None) -> BerthError:
    """Rebuilds the error from a ``{"error": {code, message, details, retryable}}`` body (or anything else)."""
    w = body.get("error") if isinstance(body, dict) else None
    if isinstance(w, dict) and isinstance(w.get("code"), str) and isinstance(w.get("message"), str):
        code: str = w["code"]
        message: str = w["message"]
        d = w.get("details")
        details: dict[str, Any] = d if isinstance(d, dict) else {}
    else:
        code = _CODE_FOR_STATUS.get(status or 0, "internal")
        message = w["message"] if isinstance(w, dict) and isinstance(w.get("message"), str) else f"HTTP {status}"
        details = {}
    retryable = (isinstance(w, dict) and w.get("retryable") is True) or code in ("unavailable", "timeout")
    if code == "policy_denied":
        stage = details.get("stage") if isinstance(details.get("stage"), str) else None
        return DeniedError(message, stage=stage, code=code, details=details, status=status, retryable=retryable)
    cls = _BY_CODE.get(code, BerthError)
    return cls(message, code=code, details=details, status=status, retryable=retryable)
