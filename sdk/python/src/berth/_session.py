"""The sync session handle: lifecycle verbs, exec (a streamed command), run, and files."""

from __future__ import annotations

import json
import threading
from typing import Any, Generator, Iterator, List, Literal, Mapping, Sequence, overload

from . import _requests as R
from ._errors import BerthError, ConnectionError, InvalidArgumentError, InvalidStateError, NotFoundError, OperationCancelled, PayloadTooLargeError, from_wire
from ._models import ExecEvent, ExecResult, FileEntry, FileStat, FileWrite, RunResult, SessionInfo, SessionState, Snapshot, StdinWrite, b64decode
from ._options import DEFAULT, Timeout
from ._desktop import Desktop
from ._ports import Ports
from ._processes import BackgroundProcess, Processes
from ._terminals import Terminals
from ._streams import BytesSource, decode_line, sync_body
from ._transport import SyncTransport, map_exception, seg

#: run(): the largest combined stdout+stderr kept, bytes.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: files.read(): the largest file read into memory, bytes.
MAX_READ_BYTES = 256 * 1024 * 1024


class Execution:
    """A running command. Iterate it (once) for :class:`ExecEvent` output chunks; :meth:`wait` gives the
    :class:`ExecResult`. Leaving the loop early, an exception in its body (KeyboardInterrupt included),
    :meth:`close` or leaving a ``with`` block drops the connection, and the server kills the command."""

    def __init__(self, t: SyncTransport, session_id: str, exec_id: str, res: Any, lines: Iterator[dict[str, Any]]) -> None:
        self._t = t
        self.session_id = session_id
        self.exec_id = exec_id
        self._res = res
        self._lines = lines
        self._consumed = False
        self._result: ExecResult | None = None
        self._error: BaseException | None = None
        self._stdin_stop = threading.Event()
        self._stdin_thread: threading.Thread | None = None

    @classmethod
    def start(
        cls,
        t: SyncTransport,
        session_id: str,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: BytesSource | bool | None = None,
        request_timeout: Timeout = None,
    ) -> Execution:
        body = R.exec_body(argv, cwd, env, timeout, stdin is not None and stdin is not False)
        path = f"/sessions/{seg(session_id)}/exec"
        res = t.open("POST", path, json=body, timeout=request_timeout, long=True)
        what = f"exec in {session_id}"

        def lines() -> Iterator[dict[str, Any]]:
            try:
                for text in res.iter_lines():
                    if text.strip():
                        yield decode_line(text)
            except BerthError:
                raise
            except Exception as e:
                raise map_exception(e, t.opts, what) from e

        it = lines()
        try:
            first = next(it, None)
            if first is None:
                raise ConnectionError(f"{what}: the stream ended before the command started", retryable=True)
            if first["type"] == "error":
                raise from_wire({"error": first["error"]}, 200)
            if first["type"] != "started":
                raise BerthError(f"{what}: expected a started line, got {first['type']}", code="internal")
        except BaseException:
            res.close()
            raise
        ex = cls(t, session_id, first["execId"], res, it)
        if stdin is not None and stdin is not True and stdin is not False:
            ex._feed_stdin(stdin)
        return ex

    def _feed_stdin(self, source: BytesSource) -> None:
        body = sync_body(source)
        stop = self._stdin_stop

        def pulled() -> Iterator[bytes]:
            if isinstance(body, bytes):
                yield body
                return
            for c in body:
                if stop.is_set():
                    return
                yield c

        def send() -> None:
            # A stdin failure is not the command's: once it exits, whatever was unsent no longer matters.
            try:
                self._t.open("POST", R.exec_path(self.session_id, self.exec_id, "stdin"), query={"close": True}, content=pulled(), long=True).close()
            except Exception:
                pass

        self._stdin_thread = threading.Thread(target=send, name=f"berth-stdin-{self.exec_id}", daemon=True)
        self._stdin_thread.start()

    def __iter__(self) -> Iterator[ExecEvent]:
        if self._consumed:
            raise InvalidStateError("an Execution can be iterated only once")
        self._consumed = True
        return self._events()

    def _events(self) -> Iterator[ExecEvent]:
        try:
            for line in self._lines:
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
            self._finish()

    def _finish(self) -> None:
        if self._result is None and self._error is None:
            self._error = OperationCancelled("output iteration stopped before the command exited; the command was killed")
        self._stdin_stop.set()
        self._res.close()

    def wait(self) -> ExecResult:
        """The exit. Drains (and discards) output not iterated yet. Raises the stream's error, or
        OperationCancelled when the output loop was left early."""
        if not self._consumed:
            for _ in self:
                pass
        elif self._result is None and self._error is None:
            self._finish()  # an iterator abandoned without being closed
        if self._result is not None:
            return self._result
        assert self._error is not None
        raise self._error

    @property
    def result(self) -> ExecResult | None:
        """The exit once the output has been read to the end, else None."""
        return self._result

    def write_stdin(self, data: BytesSource, *, close: bool = False, timeout: Timeout = DEFAULT) -> StdinWrite:
        """Appends to the command's stdin (exec with ``stdin=True``); ``close=True`` then closes it."""
        res = self._t.open("POST", R.exec_path(self.session_id, self.exec_id, "stdin"), query={"close": close}, content=sync_body(data), timeout=timeout)
        try:
            o = json.loads(res.read())
        finally:
            res.close()
        return StdinWrite(bytes=o["bytes"], closed=o["closed"])

    def close_stdin(self, *, timeout: Timeout = DEFAULT) -> StdinWrite:
        return self.write_stdin(b"", close=True, timeout=timeout)

    def kill(self, signal: int | str = "SIGKILL", *, timeout: Timeout = DEFAULT) -> int:
        """Sends a signal (number or name, default SIGKILL) to the command's process group; returns its number."""
        return self._t.call(R.kill(self.session_id, self.exec_id, signal), timeout).signal

    def close(self) -> None:
        """Drops the stream; a command still running is killed by the server."""
        if self._result is None and self._error is None:
            self._consumed = True
            self._finish()

    def __enter__(self) -> Execution:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Files:
    """Files inside a session. Paths are absolute. Transfers stream both ways and have no default deadline."""

    def __init__(self, t: SyncTransport, session_id: str) -> None:
        self._t = t
        self._sid = session_id

    def write(self, path: str, data: BytesSource, *, mode: int | None = None, timeout: Timeout = DEFAULT) -> FileWrite:
        """Writes atomically: the file appears whole or not at all. ``data`` is bytes, str (UTF-8), a file
        opened for reading, or an iterator of bytes/str, streamed as it is produced."""
        res = self._t.open(
            "PUT", R.files_path(self._sid), query={"path": path, "mode": R.write_mode(mode)}, content=sync_body(data), timeout=timeout, long=True
        )
        try:
            o = json.loads(res.read())
        except Exception as e:
            raise map_exception(e, self._t.opts, f"write {path}") from e
        finally:
            res.close()
        return FileWrite.from_wire(o)

    def stream(self, path: str, *, timeout: Timeout = DEFAULT) -> Generator[bytes, None, None]:
        """The file's bytes as they arrive. The request is sent on the first ``next()``; stopping early
        cancels the transfer."""
        res = self._t.open("GET", R.files_path(self._sid), query={"path": path}, timeout=timeout, long=True)
        yield from self._t.iter_bytes(res, f"read {path}")

    def read(self, path: str, *, max_bytes: int = MAX_READ_BYTES, timeout: Timeout = DEFAULT) -> bytes:
        """The whole file; ``max_bytes`` (default 256 MiB) guards against surprises (PayloadTooLargeError)."""
        out = bytearray()
        gen = self.stream(path, timeout=timeout)
        try:
            for c in gen:
                out += c
                if len(out) > max_bytes:
                    raise PayloadTooLargeError(f"{path} is larger than max_bytes ({max_bytes})", details={"max_bytes": max_bytes})
        finally:
            gen.close()
        return bytes(out)

    def read_text(self, path: str, *, encoding: str = "utf-8", max_bytes: int = MAX_READ_BYTES, timeout: Timeout = DEFAULT) -> str:
        return self.read(path, max_bytes=max_bytes, timeout=timeout).decode(encoding)

    def list(self, path: str, *, timeout: Timeout = DEFAULT) -> List[FileEntry]:
        return self._t.call(R.list_files(self._sid, path), timeout)

    def stat(self, path: str, *, timeout: Timeout = DEFAULT) -> FileStat:
        return self._t.call(R.stat(self._sid, path), timeout)

    def exists(self, path: str, *, timeout: Timeout = DEFAULT) -> bool:
        try:
            self.stat(path, timeout=timeout)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, *, parents: bool = False, timeout: Timeout = DEFAULT) -> None:
        self._t.call(R.mkdir(self._sid, path, parents), timeout)

    def remove(self, path: str, *, recursive: bool = False, timeout: Timeout = DEFAULT) -> None:
        self._t.call(R.remove(self._sid, path, recursive), timeout)


class Session:
    """A session handle. ``info`` is the last view the server sent; :meth:`refresh` fetches a new one.
    As a context manager it terminates the session on exit."""

    def __init__(self, t: SyncTransport, view: dict[str, Any]) -> None:
        self._t = t
        self.info = SessionInfo.from_wire(view)
        self.id = self.info.id
        #: The agent token: set only on handles returned by create and fork (the server shows it once).
        self.agent_token: str | None = view.get("agentToken")
        self.files = Files(t, self.id)
        #: The session's background commands (``exec(argv, background=True)`` starts one).
        self.processes = Processes(t, self.id)
        #: Servers listening inside the sandbox: ``ports.url(port)`` is their proxy address.
        self.ports = Ports(t, self.id)
        #: The session's terminals (PTYs in the sandbox; sync client only).
        self.terminals = Terminals(t, self.id)
        #: A desktop session's screen and its recording (a video kept in the machine).
        self.desktop = Desktop(t, self.id)

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, state={self.state!r})"

    @property
    def state(self) -> SessionState:
        return self.info.state

    def _set(self, view: dict[str, Any]) -> SessionInfo:
        self.info = SessionInfo.from_wire(view)
        return self.info

    def refresh(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(self._t.call(R.get_session(self.id), timeout))

    def pause(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        """Freezes the processes; memory is kept."""
        return self._set(self._t.call(R.lifecycle(self.id, "pause"), timeout))

    def resume(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(self._t.call(R.lifecycle(self.id, "resume"), timeout))

    def hibernate(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        """Checkpoints the machine to disk and frees its RAM. exec, run and files wake it transparently."""
        return self._set(self._t.call(R.lifecycle(self.id, "hibernate"), timeout))

    def wake(self, *, timeout: Timeout = DEFAULT) -> SessionInfo:
        return self._set(self._t.call(R.lifecycle(self.id, "wake"), timeout))

    def snapshot(self, name: str | None = None, *, timeout: Timeout = DEFAULT) -> Snapshot:
        """A named snapshot of the running machine (memory and disk); fork it with ``snapshots.fork``."""
        return self._t.call(R.snapshot(self.id, name), timeout)

    def terminate(self, *, timeout: Timeout = DEFAULT) -> None:
        """Stops and wipes the machine. Terminal."""
        self._t.call(R.terminate(self.id), timeout)
        self.info = SessionInfo.from_wire({**self.info.raw, "state": "terminated"})

    @overload
    def exec(
        self,
        argv: Sequence[str],
        *,
        background: Literal[True],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        request_timeout: Timeout = DEFAULT,
    ) -> BackgroundProcess: ...

    @overload
    def exec(
        self,
        argv: Sequence[str],
        *,
        background: Literal[False] = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: BytesSource | bool | None = None,
        request_timeout: Timeout = None,
    ) -> Execution: ...

    @overload
    def exec(
        self,
        argv: Sequence[str],
        *,
        background: bool,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: BytesSource | bool | None = None,
        request_timeout: Timeout = DEFAULT,
    ) -> Execution | BackgroundProcess: ...

    def exec(
        self,
        argv: Sequence[str],
        *,
        background: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: BytesSource | bool | None = None,
        request_timeout: Timeout = DEFAULT,
    ) -> Execution | BackgroundProcess:
        """Starts a command and returns once it runs.

        ``timeout``: seconds after which the server kills the command (``timed_out`` in the result);
        None = no limit. ``stdin``: data fed to the command then closed, or True for a pipe written with
        ``write_stdin``; None = /dev/null. ``request_timeout``: seconds the stream may go without a line
        (the server sends a ping every 15 s, so anything above that detects a dead connection); None.

        ``background=True``: the command runs on its own (no stdin) and a :class:`BackgroundProcess`
        (``exec_id``, ``pid``) is returned at once; ``request_timeout`` then bounds that call (default: the
        client's timeout)."""
        if background:
            if stdin is not None and stdin is not False:
                raise InvalidArgumentError("stdin: a background command has no stdin", details={"field": "stdin"})
            exec_id, pid = self._t.call(R.start_background(self.id, argv, cwd, env, timeout), request_timeout)
            return BackgroundProcess(self._t, self.id, exec_id, pid)
        return Execution.start(self._t, self.id, argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin, request_timeout=None if request_timeout is DEFAULT else request_timeout)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        stdin: BytesSource | None = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        request_timeout: Timeout = None,
    ) -> RunResult:
        """Runs a command to its end and collects its output. A non-zero exit is a result, not an error.
        Beyond ``max_output_bytes`` (stdout+stderr, default 64 MiB) the command is killed and
        PayloadTooLargeError raised."""
        out, err = bytearray(), bytearray()
        with self.exec(argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin, request_timeout=request_timeout) as ex:
            for ev in ex:
                (out if ev.type == "stdout" else err).extend(ev.data)
                if len(out) + len(err) > max_output_bytes:
                    raise PayloadTooLargeError(f"output exceeded max_output_bytes ({max_output_bytes})", details={"max_output_bytes": max_output_bytes})
            r = ex.wait()
        return RunResult(exit_code=r.exit_code, signal=r.signal, timed_out=r.timed_out, stdout_bytes=bytes(out), stderr_bytes=bytes(err))

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.state == "terminated":
            return
        try:
            self.terminate()
        except (NotFoundError, InvalidStateError):
            pass
