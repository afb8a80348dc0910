"""Background processes (``session.exec(argv, background=True)``, ``session.processes``): commands that
run on their own inside the sandbox, whose output the sandbox keeps (the last 1 MiB of each stream). The
sync and async handles share the requests (``_requests``) and the reading of output lines (:func:`_read`);
they differ only in how they wait."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Iterator, List, Union

from . import _requests as R
from ._errors import BerthError, ConnectionError, from_wire
from ._models import ProcessExit, ProcessInfo, ProcessKill, ProcessOutput, b64decode
from ._options import DEFAULT, Timeout
from ._streams import decode_process_line
from ._transport import AsyncTransport, SyncTransport, map_exception

#: What ``output()`` yields: chunks, then (once the command has ended) its exit.
ProcessEvent = Union[ProcessOutput, ProcessExit]
#: While following, reconnection attempts in a row after a dropped connection (as the TypeScript SDK).
RECONNECTS = 20
#: Seconds between reconnection attempts.
RECONNECT_DELAY_S = 0.5

class _End:
    """The end of what the ring holds (no follow, the command still runs)."""


_END = _End()


def _read(text: str) -> ProcessEvent | _End | None:
    """One NDJSON line → an event, None (a ping or blank line), or _END (the ring's end, no follow)."""
    if not text.strip():
        return None
    line = decode_process_line(text)
    kind = line["type"]
    if kind == "ping":
        return None
    if kind == "error":
        raise from_wire({"error": line["error"]}, 200)
    if kind == "end":
        return _END
    if kind == "exit":
        return ProcessExit(exit_code=line["code"], signal=line.get("signal"), timed_out=bool(line.get("timedOut")))
    return ProcessOutput(type=kind, data=b64decode(line["data"]), offset=line["offset"], cursor=line["cursor"])


def _retryable(e: BerthError, follow: bool, failures: int, reconnects: int) -> bool:
    return follow and failures <= reconnects and e.code in ("unavailable", "timeout")


def _cut(what: str) -> ConnectionError:
    return ConnectionError(f"{what}: the stream was cut before its end", retryable=True)


class BackgroundProcess:
    """A background command by id: ``exec_id`` and ``pid`` (None on a handle from ``processes.get``).
    Leaving an :meth:`output` loop never stops the command; :meth:`kill` does."""

    def __init__(self, t: SyncTransport, session_id: str, exec_id: str, pid: int | None = None) -> None:
        self._t = t
        self._sid = session_id
        self._exec_id = exec_id
        self._pid = pid

    @property
    def session_id(self) -> str:
        return self._sid

    @property
    def exec_id(self) -> str:
        return self._exec_id

    @property
    def pid(self) -> int | None:
        """The pid inside the sandbox (None on a handle from ``processes.get``: see ``info().pid``)."""
        return self._pid

    def __repr__(self) -> str:
        return f"BackgroundProcess(exec_id={self.exec_id!r}, pid={self.pid!r})"

    def info(self, *, timeout: Timeout = DEFAULT) -> ProcessInfo:
        """The record now: state, exit code, times, bytes written. NotFoundError for an unknown id."""
        return self._t.call(R.get_process(self.session_id, self.exec_id), timeout)

    def kill(self, signal: int | str | None = None, *, timeout: Timeout = DEFAULT) -> ProcessKill:
        """Signals the command's process group (number or name; default SIGTERM). ``signalled`` is False
        when it had already ended."""
        return self._t.call(R.kill_process(self.session_id, self.exec_id, signal), timeout)

    def output(
        self, *, follow: bool = False, offset: str | int | None = None, reconnects: int = RECONNECTS, request_timeout: Timeout = None
    ) -> Iterator[ProcessEvent]:
        """What the sandbox kept (from ``offset``: a ``cursor`` or a stdout byte offset; default the oldest
        byte kept), then with ``follow`` live output until the exit. Ends with a :class:`ProcessExit` once
        the command has ended; without ``follow`` a running command's output just ends. While following, a
        dropped connection is resumed from the last cursor (``reconnects`` attempts in a row, 0.5 s apart):
        nothing is lost or repeated. ``request_timeout``: seconds without a line (the server pings every
        15 s) before the connection counts as dropped."""
        R.output_query(follow, offset)  # a bad offset fails here, not at the first next()
        return self._output(follow, None if offset is None else str(offset), reconnects, request_timeout)

    def _output(self, follow: bool, cursor: str | None, reconnects: int, request_timeout: Timeout) -> Iterator[ProcessEvent]:
        path = f"{R.process_path(self.session_id, self.exec_id)}/output"
        what = f"output of {self.exec_id}"
        failures = 0
        while True:
            try:
                res = self._t.open("GET", path, query=R.output_query(follow, cursor), timeout=request_timeout, long=True)
                try:
                    try:
                        for text in res.iter_lines():
                            ev = _read(text)
                            if ev is None:
                                continue
                            failures = 0
                            if isinstance(ev, _End):
                                return
                            yield ev
                            if isinstance(ev, ProcessExit):
                                return
                            cursor = ev.cursor
                    except BerthError:
                        raise
                    except Exception as e:
                        raise map_exception(e, self._t.opts, what) from e
                    raise _cut(what)
                finally:
                    res.close()
            except BerthError as e:
                failures += 1
                if not _retryable(e, follow, failures, reconnects):
                    raise
                time.sleep(RECONNECT_DELAY_S)

    def wait(self, *, request_timeout: Timeout = None) -> ProcessExit:
        """Follows the output from now (what was written before is not fetched) and returns the exit."""
        i = self.info()
        for ev in self._output(True, f"{i.stdout_bytes},{i.stderr_bytes}", RECONNECTS, request_timeout):
            if isinstance(ev, ProcessExit):
                return ev
        raise _cut(f"output of {self.exec_id}")


class Processes:
    """``session.processes``: the session's background commands, from any client, at any time."""

    def __init__(self, t: SyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    def list(self, *, timeout: Timeout = DEFAULT) -> List[ProcessInfo]:
        """Running and finished background commands, newest first (the sandbox keeps 32 records)."""
        return self._t.call(R.list_processes(self._sid), timeout)

    def get(self, exec_id: str) -> BackgroundProcess:
        """A handle by id; no request is made (its ``info()``, ``output()`` or ``kill()`` raise
        NotFoundError for an unknown id)."""
        return BackgroundProcess(self._t, self._sid, exec_id)


class AsyncBackgroundProcess:
    """As :class:`BackgroundProcess`, with ``await`` and ``async for``."""

    def __init__(self, t: AsyncTransport, session_id: str, exec_id: str, pid: int | None = None) -> None:
        self._t = t
        self._sid = session_id
        self._exec_id = exec_id
        self._pid = pid

    @property
    def session_id(self) -> str:
        return self._sid

    @property
    def exec_id(self) -> str:
        return self._exec_id

    @property
    def pid(self) -> int | None:
        """The pid inside the sandbox (None on a handle from ``processes.get``: see ``info().pid``)."""
        return self._pid

    def __repr__(self) -> str:
        return f"AsyncBackgroundProcess(exec_id={self.exec_id!r}, pid={self.pid!r})"

    async def info(self, *, timeout: Timeout = DEFAULT) -> ProcessInfo:
        return await self._t.call(R.get_process(self.session_id, self.exec_id), timeout)

    async def kill(self, signal: int | str | None = None, *, timeout: Timeout = DEFAULT) -> ProcessKill:
        return await self._t.call(R.kill_process(self.session_id, self.exec_id, signal), timeout)

    def output(
        self, *, follow: bool = False, offset: str | int | None = None, reconnects: int = RECONNECTS, request_timeout: Timeout = None
    ) -> AsyncIterator[ProcessEvent]:
        R.output_query(follow, offset)
        return self._output(follow, None if offset is None else str(offset), reconnects, request_timeout)

    async def _output(self, follow: bool, cursor: str | None, reconnects: int, request_timeout: Timeout) -> AsyncIterator[ProcessEvent]:
        path = f"{R.process_path(self.session_id, self.exec_id)}/output"
        what = f"output of {self.exec_id}"
        failures = 0
        while True:
            try:
                res = await self._t.open("GET", path, query=R.output_query(follow, cursor), timeout=request_timeout, long=True)
                try:
                    try:
                        async for text in res.aiter_lines():
                            ev = _read(text)
                            if ev is None:
                                continue
                            failures = 0
                            if isinstance(ev, _End):
                                return
                            yield ev
                            if isinstance(ev, ProcessExit):
                                return
                            cursor = ev.cursor
                    except BerthError:
                        raise
                    except Exception as e:
                        raise map_exception(e, self._t.opts, what) from e
                    raise _cut(what)
                finally:
                    await res.aclose()
            except BerthError as e:
                failures += 1
                if not _retryable(e, follow, failures, reconnects):
                    raise
                await asyncio.sleep(RECONNECT_DELAY_S)

    async def wait(self, *, request_timeout: Timeout = None) -> ProcessExit:
        i = await self.info()
        async for ev in self._output(True, f"{i.stdout_bytes},{i.stderr_bytes}", RECONNECTS, request_timeout):
            if isinstance(ev, ProcessExit):
                return ev
        raise _cut(f"output of {self.exec_id}")


class AsyncProcesses:
    """As :class:`Processes`, with ``await``."""

    def __init__(self, t: AsyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    async def list(self, *, timeout: Timeout = DEFAULT) -> List[ProcessInfo]:
        return await self._t.call(R.list_processes(self._sid), timeout)

    def get(self, exec_id: str) -> AsyncBackgroundProcess:
        return AsyncBackgroundProcess(self._t, self._sid, exec_id)
