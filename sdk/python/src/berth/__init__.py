"""Berth's Python SDK: isolated, persistent machines for AI-agent sessions, and the gated tool API.

    from berth import Berth
    with Berth.from_env() as berth:
        with berth.sessions.create(memory_mb=1024) as s:     # terminated when the block ends
            print(s.run(["uname", "-a"]).stdout)

:class:`Berth` is the sync client, :class:`AsyncBerth` the asyncio one. Every error is a
:class:`BerthError` with the server's ``code``.
"""

from ._async_client import AsyncBerth
from ._async_session import AsyncExecution, AsyncFiles, AsyncSession
from ._client import Berth
from ._errors import (
    ApprovalPending,
    BerthError,
    ConfigError,
    ConflictError,
    ConnectionError,
    DeniedError,
    ForbiddenError,
    InvalidArgumentError,
    InvalidStateError,
    NotFoundError,
    OperationCancelled,
    PayloadTooLargeError,
    SandboxFailedError,
    TimeoutError,
    UnauthenticatedError,
    UnavailableError,
)
from ._models import (
    Approval,
    ApprovalStatus,
    AuditEntry,
    AuditVerification,
    Breaker,
    CallResult,
    CreatedTenant,
    ExecEvent,
    ExecResult,
    FileEntry,
    FileStat,
    FileWrite,
    Gate,
    Health,
    Metering,
    Plan,
    Policy,
    Principal,
    ProcessExit,
    ProcessInfo,
    ProcessKill,
    ProcessOutput,
    RunResult,
    SessionInfo,
    SessionSettings,
    SessionState,
    Snapshot,
    StdinWrite,
    Tenant,
    Tool,
    ToolDefinition,
)
from ._options import DEFAULT, DEFAULT_TIMEOUT, DEFAULT_URL, EnvResolution, resolve_env
from ._desktop import AsyncDesktop, Desktop, DesktopInfo, DesktopRecording
from ._ports import AsyncPorts, PortLink, Ports
from ._processes import AsyncBackgroundProcess, AsyncProcesses, BackgroundProcess, ProcessEvent, Processes
from ._terminals import Terminal, Terminals
from ._session import Execution, Files, Session
from ._streams import AsyncBytesSource, BytesSource

__version__ = "0.1.0"

__all__ = [
    "AsyncBackgroundProcess",
    "AsyncBerth",
    "AsyncDesktop",
    "Desktop",
    "DesktopInfo",
    "DesktopRecording",
    "AsyncProcesses",
    "BackgroundProcess",
    "AsyncPorts",
    "PortLink",
    "Ports",
    "Processes",
    "Terminal",
    "Terminals",
    "ProcessEvent",
    "AsyncExecution",
    "AsyncFiles",
    "AsyncSession",
    "Berth",
    "Execution",
    "Files",
    "Session",
    "ApprovalPending",
    "BerthError",
    "ConfigError",
    "ConflictError",
    "ConnectionError",
    "DeniedError",
    "ForbiddenError",
    "InvalidArgumentError",
    "InvalidStateError",
    "NotFoundError",
    "OperationCancelled",
    "PayloadTooLargeError",
    "SandboxFailedError",
    "TimeoutError",
    "UnauthenticatedError",
    "UnavailableError",
    "Approval",
    "ApprovalStatus",
    "AuditEntry",
    "AuditVerification",
    "Breaker",
    "CallResult",
    "CreatedTenant",
    "ExecEvent",
    "ExecResult",
    "FileEntry",
    "FileStat",
    "FileWrite",
    "Gate",
    "Health",
    "Metering",
    "Plan",
    "Policy",
    "Principal",
    "ProcessExit",
    "ProcessInfo",
    "ProcessKill",
    "ProcessOutput",
    "RunResult",
    "SessionInfo",
    "SessionSettings",
    "SessionState",
    "Snapshot",
    "StdinWrite",
    "Tenant",
    "Tool",
    "ToolDefinition",
    "DEFAULT",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "EnvResolution",
    "resolve_env",
    "AsyncBytesSource",
    "BytesSource",
    "__version__",
]
