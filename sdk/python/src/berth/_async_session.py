"""The async session handle: the sync one's API with ``await``. Cancelling the task that awaits an exec,
run or transfer drops its connection (the server kills the command; a half-written file never appears)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator, AsyncIterator, List, Literal, Mapping, Sequence, overload

from . import _requests as R
from ._errors import BerthError, ConnectionError, InvalidArgumentError, InvalidStateError, NotFoundError, OperationCancelled, PayloadTooLargeError, from_wire
from ._models import ExecEvent, ExecResult, FileEntry, FileStat, FileWrite, RunResult, SessionInfo, SessionState, Snapshot, StdinWrite, b64decode
from ._options import DEFAULT, Timeout
from ._desktop import AsyncDesktop
from ._ports import AsyncPorts
from ._processes import AsyncBackgroundProcess, AsyncProcesses
from ._session import MAX_OUTPUT_BYTES, MAX_READ_BYTES
from ._streams import AsyncBytesSource, async_body, decode_line
from ._transport import AsyncTransport, map_exception, seg


class AsyncExecution:
    """A running command: ``async for ev in execution`` (once), then ``await execution.wait()``. Use
    ``async with`` (or :meth:`aclose`) to drop the stream deterministically when leaving the loop early."""

    def __init__(self, t: AsyncTransport, session_id: str, exec_id: str, res: Any, lines: AsyncIterator[dict[str, Any]]) -> None:
        self._t = t
        self.session_id = session_id
        self.exec_id = exec_id
        self._res = res
        self._lines = lines
        self._consumed = False
        self._result: ExecResult | None = None
        self._error: BaseException | None = None
        self._stdin_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        t: AsyncTransport,
        session_id: str,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: AsyncBytesSource | bool | None = None,
        request_timeout: Timeout = None,
    ) -> AsyncExecution:
        body = R.exec_body(argv, cwd, env, timeout, stdin is not None and stdin is not False)
        res = await t.open("POST", f"/sessions/{seg(session_id)}/exec", json=body, timeout=request_timeout, long=True)
        what = f"exec in {session_id}"

        async def lines() -> AsyncGenerator[dict[str, Any], None]:
            try:
                async for text in res.aiter_lines():
                    if text.strip():
                        yield decode_line(text)
            except BerthError:
                raise
            except Exception as e:
                raise map_exception(e, t.opts, what) from e

        it = lines()
        try:
            first = await it.__anext__()
            if first["type"] == "error":
                raise from_wire({"error": first["error"]}, 200)
            if first["type"] != "started":
                raise BerthError(f"{what}: expected a started line, got {first['type']}", code="internal")
        except StopAsyncIteration:
            await res.aclose()
            raise ConnectionError(f"{what}: the stream ended before the command started", retryable=True) from None
        except BaseException:
            await it.aclose()
            await res.aclose()
            raise
        ex = cls(t, session_id, first["execId"], res, it)
        if stdin is not None and stdin is not True and stdin is not False:
            ex._stdin_task = asyncio.ensure_future(ex._send_stdin(stdin))
        return ex

    async def _send_stdin(self, source: AsyncBytesSource) -> None:
        # A stdin failure is not the command's: once it exits, whatever was unsent no longer matters.
        try:
            path = R.exec_path(self.session_id, self.exec_id, "stdin")
            res = await self._t.open("POST", path, query={"close": True}, content=async_body(source), long=True)
            await res.aclose()
        except Exception:
            pass

    def __aiter__(self) -> AsyncIterator[ExecEvent]:
        if self._consumed:
            raise InvalidStateError("an AsyncExecution can be iterated only once")
        self._consumed = True
        return self._events()

    async def _events(self) -> AsyncIterator[ExecEvent]:
        try:
            async for line in self._lines:
                kind = line["type"]
                if kind == "stdout" or kind == "stderr":
                    yield ExecEvent(type=kind, data=b64decode(line["data"]))
                elif kind == "exit":
                    self._result = ExecResult(exit_code=line["code"], signal=line.get("signal"), timed_out=line["timedOut"])
                    return
                elif kind == "error":
                    raise from_wire({"error": line["error"]}, 200)
            raise ConnectionError(f"exec {self.exec_id}: the stream ended before the command exited", retryable=True)
        except BerthError as e:
            self._error = e
            raise
        finally:
            await self._finish()

    async def _finish(self) -> None:
        if self._result is None and self._error is None:
            self._error = OperationCancelled("output iteration stopped before the command exited; the command was killed")
        if self._stdin_task is not None and not self._stdin_task.done():
            self._stdin_task.cancel()
        await self._res.aclose()

    async def wait(self) -> ExecResult:
        """The exit; drains output not iterated yet. Raises the stream's error, or OperationCancelled when
        the output loop was left early."""
        if not self._consumed:
            async for _ in self:
                pass
        elif self._result is None and self._error is None:
            await self._finish()
        if self._result is not None:
            return self._result
        assert self._error is not None
        raise self._error

    @property
    def result(self) -> ExecResult | None:
        return self._result

    async def write_stdin(self, data: AsyncBytesSource, *, close: bool = False, timeout: Timeout = DEFAULT) -> StdinWrite:
        res = await self._t.open(
            "POST", R.exec_path(self.session_id, self.exec_id, "stdin"), query={"close": close}, content=async_body(data), timeout=timeout
        )
        try:
            o = json.loads(await res.aread())
        finally:
            await res.aclose()
        return StdinWrite(bytes=o["bytes"], closed=o["closed"])

    async def close_stdin(self, *, timeout: Timeout = DEFAULT) -> StdinWrite:
        return await self.write_stdin(b"", close=True, timeout=timeout)

    async def kill(self, signal: int | str = "SIGKILL", *, timeout: Timeout = DEFAULT) -> int:
        return (await self._t.call(R.kill(self.session_id, self.exec_id, signal), timeout)).signal

    async def aclose(self) -> None:
        if self._result is None and self._error is None:
            self._consumed = True
            await self._finish()

    async def __aenter__(self) -> AsyncExecution:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncFiles:
    def __init__(self, t: AsyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    async def write(self, path: str, data: AsyncBytesSource, *, mode: int | None = None, timeout: Timeout = DEFAULT) -> FileWrite:
        """Writes atomically. ``data``: bytes, str, a file, or a (sync or async) iterator of bytes/str."""
        res = await self._t.open(
            "PUT", R.files_path(self._sid), query={"path": path, "mode": R.write_mode(mode)}, content=async_body(data), timeout=timeout, long=True
        )
        try:
            o = json.loads(await res.aread())
        except Exception as e:
            raise map_exception(e, self._t.opts, f"write {path}") from e
        finally:
            await res.aclose()
        return FileWrite.from_wire(o)

    async def stream(self, path: str, *, timeout: Timeout = DEFAULT) -> AsyncGenerator[bytes, None]:
        """``async for chunk in files.stream(path)``: the file's bytes as they arrive."""
        res = await self._t.open("GET", R.files_path(self._sid), query={"path": path}, timeout=timeout, long=True)
        async for c in self._t.iter_bytes(res, f"read {path}"):
            yield c

    async def read(self, path: str, *, max_bytes: int = MAX_READ_BYTES, timeout: Timeout = DEFAULT) -> bytes:
        out = bytearray()
        gen = self.stream(path, timeout=timeout)
        try:
            async for c in gen:
                out += c
                if len(out) > max_bytes:
                    raise PayloadTooLargeError(f"{path} is larger than max_bytes ({max_bytes})", details={"max_bytes": max_bytes})
        finally:
            await gen.aclose()
        return bytes(out)

    async def read_text(self, path: str, *, encoding: str = "utf-8", max_bytes: int = MAX_READ_BYTES, timeout: Timeout = DEFAULT) -> str:
        return (await self.read(path, max_bytes=max_bytes, timeout=timeout)).decode(encoding)

    async def list(self, path: str, *, timeout: Timeout = DEFAULT) -> List[FileEntry]:
        return await self._t.call(R.list_files(self._sid, path), timeout)

    async def stat(self, path: str, *, timeout: Timeout = DEFAULT) -> FileStat:
        return await self._t.call(R.stat(self._sid, path), timeout)

    async def exists(self, path: str, *, timeout: Timeout = DEFAULT) -> bool:
        try:
            await self.stat(path, timeout=timeout)
            return True
        except NotFoundError:
            return False

    async def mkdir(self, path: str, *, parents: bool = False, timeout: Timeout = DEFAULT) -> None:
        await self._t.call(R.mkdir(self._sid, path, parents), timeout)

    async def remove(self, path: str, *, recursive: bool = False, timeout: Timeout = DEFAULT) -> None:
        await self._t.call(R.remove(self._sid, path, recursive), timeout)


class AsyncSession:
    """The async session handle; ``async with`` terminates it on exit."""

    def __init__(self, t: AsyncTransport, view: dict[str, Any]) -> None:
        self._t = t
        self.info = SessionInfo.from_wire(view)
        self.id = self.info.id
        self.agent_token: str | None = view.get("agentToken")
        self.files = AsyncFiles(t, self.id)
        #: The session's background commands (``exec(argv, background=True)`` starts one).
        self.processes = AsyncProcesses(t, self.id)
        #: Servers listening inside the sandbox: ``ports.url(port)`` is their proxy address.
        self.ports = AsyncPorts(t, self.id)
        #: A desktop session's screen and its recording (a video kept in the machine).
        self.desktop = AsyncDesktop(t, self.id)

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, state={self.state!r})"

    @property
    def state(self) -> SessionState:
        return self.info.state

    def _set(self, view: dict[str, Any]) -> SessionInfo:
        self.info = SessionInfo.from_wire(view)
        return self.info

    async def refresh(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(await self._t.call(R.get_session(self.id), timeout))

    async def pause(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(await self._t.call(R.lifecycle(self.id, "pause"), timeout))

    async def resume(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(await self._t.call(R.lifecycle(self.id, "resume"), timeout))

    async def hibernate(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(await self._t.call(R.lifecycle(self.id, "hibernate"), timeout))

    async def wake(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(await self._t.call(R.lifecycle(self.id, "wake"), timeout))

    async def snapshot(self, name: str | None = None, *, timeout: Timeout = DEFAULT) -> Snapshot:
        return await self._t.call(R.snapshot(self.id, name), timeout)

    async def terminate(self, *, timeout: Timeout = DEFAULT) -> None:
        await self._t.call(R.terminate(self.id), timeout)
        self.info = SessionInfo.from_wire({**self.info.raw, "state": "terminated"})

    @overload
    async def exec(
        self,
        argv: Sequence[str],
        *,
        background: Literal[True],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        request_timeout: Timeout = DEFAULT,
    ) -> AsyncBackgroundProcess: ...

    @overload
    async def exec(
        self,
        argv: Sequence[str],
        *,
        background: Literal[False] = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: AsyncBytesSource | bool | None = None,
        request_timeout: Timeout = None,
    ) -> AsyncExecution: ...

    @overload
    async def exec(
        self,
        argv: Sequence[str],
        *,
        background: bool,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: AsyncBytesSource | bool | None = None,
        request_timeout: Timeout = DEFAULT,
    ) -> AsyncExecution | AsyncBackgroundProcess: ...

    async def exec(
        self,
        argv: Sequence[str],
        *,
        background: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: AsyncBytesSource | bool | None = None,
        request_timeout: Timeout = DEFAULT,
    ) -> AsyncExecution | AsyncBackgroundProcess:
        """As :meth:`berth.Session.exec`."""
        if background:
            if stdin is not None and stdin is not False:
                raise InvalidArgumentError("stdin: a background command has no stdin", details={"field": "stdin"})
            exec_id, pid = await self._t.call(R.start_background(self.id, argv, cwd, env, timeout), request_timeout)
            return AsyncBackgroundProcess(self._t, self.id, exec_id, pid)
        return await AsyncExecution.start(self._t, self.id, argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin, request_timeout=None if request_timeout is DEFAULT else request_timeout)

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: AsyncBytesSource | None = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        request_timeout: Timeout = None,
    ) -> RunResult:
        """As :meth:`berth.Session.run`."""
        out, err = bytearray(), bytearray()
        ex = await self.exec(argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin, request_timeout=request_timeout)
        async with ex:
            async for ev in ex:
                (out if ev.type == "stdout" else err).extend(ev.data)
                if len(out) + len(err) > max_output_bytes:
                    raise PayloadTooLargeError(f"output exceeded max_output_bytes ({max_output_bytes})", details={"max_output_bytes": max_output_bytes})
            r = await ex.wait()
        return RunResult(exit_code=r.exit_code, signal=r.signal, timed_out=r.timed_out, stdout_bytes=bytes(out), stderr_bytes=bytes(err))

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.state == "terminated":
            return
        try:
            await self.terminate()
        except (NotFoundError, InvalidStateError):
            pass
