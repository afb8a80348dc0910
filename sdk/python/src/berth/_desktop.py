"""A session's desktop (``session.desktop``, sessions created with ``desktop=True`` or a screen size): its
screen, and a recording of it for review. The video (MPEG-TS, H.264, 5 fps) is kept inside the session's
machine: one per session, replaced by the next recording, capped (default: the smaller of 256 MiB and a
quarter of the session's memory), removed with the session. Every call on a session created without a
desktop raises InvalidStateError (``details["reason"] == "no_desktop"``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncGenerator, Generator, Optional

from ._errors import InvalidArgumentError, PayloadTooLargeError
from ._models import parse_time
from ._options import DEFAULT, Timeout
from ._transport import AsyncTransport, Req, SyncTransport, seg

#: recording(): the largest video read into memory, bytes (the server's own cap is 4 GiB).
MAX_RECORDING_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class DesktopRecording:
    """The recording's state. ``started_at``/``ended_at`` (UTC, the sandbox's clock) are None when nothing
    was recorded (``ended_at`` also while recording); ``bytes`` and ``cap`` in bytes; ``stopped`` is set
    only on the answer to ``stop_recording`` (False: nothing was recording). ``raw``: the server's JSON."""

    recording: bool
    bytes: int
    started_at: Optional[datetime]
    ended_at: Optional[datetime]
    cap: Optional[int]
    exec_id: Optional[str]
    fps: int
    stopped: Optional[bool] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> "DesktopRecording":
        return cls(
            recording=o["recording"],
            bytes=o["bytes"],
            started_at=parse_time(o["startedAt"]),
            ended_at=parse_time(o["endedAt"]),
            cap=o["cap"],
            exec_id=o["execId"],
            fps=o["fps"],
            stopped=o.get("stopped"),
            raw=o,
        )


@dataclass(frozen=True)
class DesktopInfo:
    session_id: str
    width: int
    height: int
    recording: DesktopRecording
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, o: dict[str, Any]) -> "DesktopInfo":
        return cls(session_id=o["sessionId"], width=o["screen"]["width"], height=o["screen"]["height"], recording=DesktopRecording.from_wire(o["recording"]), raw=o)


def _base(session_id: str) -> str:
    return f"/sessions/{seg(session_id)}/desktop"


def _info_req(session_id: str) -> Req[DesktopInfo]:
    return Req("GET", _base(session_id), DesktopInfo.from_wire)


def _start_req(session_id: str, max_bytes: Optional[int]) -> Req[DesktopRecording]:
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
        raise InvalidArgumentError(f"max_bytes: must be a positive integer number of bytes, got {max_bytes!r}")
    body: dict[str, Any] = {} if max_bytes is None else {"maxBytes": max_bytes}
    # long: it answers once ffmpeg has written its first frame (a few seconds at most).
    return Req("POST", f"{_base(session_id)}/recording/start", DesktopRecording.from_wire, json=body, long=True)


def _stop_req(session_id: str) -> Req[DesktopRecording]:
    return Req("POST", f"{_base(session_id)}/recording/stop", DesktopRecording.from_wire, json={}, long=True)


def _too_large(max_bytes: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"the recording is larger than max_bytes ({max_bytes})", details={"max_bytes": max_bytes})


class Desktop:
    """``session.desktop``: the screen, and recording it."""

    def __init__(self, t: SyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    def info(self, *, timeout: Timeout = DEFAULT) -> DesktopInfo:
        """The screen size and the recording's state."""
        return self._t.call(_info_req(self._sid), timeout)

    def record(self, *, max_bytes: Optional[int] = None, timeout: Timeout = DEFAULT) -> DesktopRecording:
        """Starts recording (replacing an earlier video); returns once the first frame is written.
        ``max_bytes``: the size cap (at most half the session's memory). ConflictError while one records."""
        return self._t.call(_start_req(self._sid, max_bytes), timeout)

    def stop_recording(self, *, timeout: Timeout = DEFAULT) -> DesktopRecording:
        """Stops recording (the video stays); ``stopped`` is False when nothing was recording."""
        return self._t.call(_stop_req(self._sid), timeout)

    def recording_stream(self, *, timeout: Timeout = DEFAULT) -> Generator[bytes, None, None]:
        """The video so far (MPEG-TS) as it arrives; NotFoundError when nothing was recorded."""
        res = self._t.open("GET", f"{_base(self._sid)}/recording", timeout=timeout, long=True)
        yield from self._t.iter_bytes(res, "read the desktop recording")

    def recording(self, *, max_bytes: int = MAX_RECORDING_BYTES, timeout: Timeout = DEFAULT) -> bytes:
        """The video so far (MPEG-TS), whole; ``max_bytes`` guards memory (PayloadTooLargeError)."""
        out = bytearray()
        gen = self.recording_stream(timeout=timeout)
        try:
            for c in gen:
                out += c
                if len(out) > max_bytes:
                    raise _too_large(max_bytes)
        finally:
            gen.close()
        return bytes(out)


class AsyncDesktop:
    """``session.desktop`` of an async session: as :class:`Desktop`, awaited."""

    def __init__(self, t: AsyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    async def info(self, *, timeout: Timeout = DEFAULT) -> DesktopInfo:
        return await self._t.call(_info_req(self._sid), timeout)

    async def record(self, *, max_bytes: Optional[int] = None, timeout: Timeout = DEFAULT) -> DesktopRecording:
        return await self._t.call(_start_req(self._sid, max_bytes), timeout)

    async def stop_recording(self, *, timeout: Timeout = DEFAULT) -> DesktopRecording:
        return await self._t.call(_stop_req(self._sid), timeout)

    async def recording_stream(self, *, timeout: Timeout = DEFAULT) -> AsyncGenerator[bytes, None]:
        res = await self._t.open("GET", f"{_base(self._sid)}/recording", timeout=timeout, long=True)
        async for c in self._t.iter_bytes(res, "read the desktop recording"):
            yield c

    async def recording(self, *, max_bytes: int = MAX_RECORDING_BYTES, timeout: Timeout = DEFAULT) -> bytes:
        out = bytearray()
        gen = self.recording_stream(timeout=timeout)
        try:
            async for c in gen:
                out += c
                if len(out) > max_bytes:
                    raise _too_large(max_bytes)
        finally:
            await gen.aclose()
        return bytes(out)
