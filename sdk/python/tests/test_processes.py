"""Background processes through both clients, against the real server and gVisor sandboxes: start, list,
follow (every byte exactly once, then the exit), replay after the end, resume from a cursor, kill, and a
follow that survives its connection being cut."""

from __future__ import annotations

import socket
import threading
from datetime import datetime
from typing import Iterator, List, Sequence

import pytest

import berth
from conftest import Server, wait_until

LINES = [f"line {i}\n" for i in range(1, 9)]
# Eight lines over ~2 s, one on stderr, then exit 3.
TICKER = ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.25; done; echo done >&2; exit 3"]


def _split(events: Sequence[berth.ProcessEvent], start: str = "0,0") -> tuple[bytes, bytes, List[berth.ProcessOutput], berth.ProcessExit | None]:
    """stdout, stderr, the chunks and the exit; every chunk must start where the previous one of its
    stream ended (from ``start``, a cursor)."""
    at = [int(n) for n in start.split(",")]
    out, err, chunks, ex = bytearray(), bytearray(), [], None
    for ev in events:
        assert ex is None, "nothing may come after the exit"
        if isinstance(ev, berth.ProcessExit):
            ex = ev
            continue
        buf, base = (out, at[0]) if ev.type == "stdout" else (err, at[1])
        assert ev.offset == base + len(buf), f"{ev.type} chunk at {ev.offset}, expected {base + len(buf)} (a gap or a repeat)"
        buf.extend(ev.data)
        chunks.append(ev)
    return bytes(out), bytes(err), chunks, ex


def test_start_list_follow_replay_and_resume(session: berth.Session) -> None:
    p = session.exec(TICKER, background=True)
    assert isinstance(p, berth.BackgroundProcess) and p.exec_id and isinstance(p.pid, int) and p.pid > 0
    listed = {x.exec_id: x for x in session.processes.list()}
    assert listed[p.exec_id].state == "running" and listed[p.exec_id].exit_code is None
    assert listed[p.exec_id].argv == TICKER and listed[p.exec_id].pid == p.pid

    out, err, chunks, ex = _split(list(p.output(follow=True)))
    assert out.decode() == "".join(LINES) and err == b"done\n"
    assert ex is not None and (ex.exit_code, ex.signal, ex.timed_out, ex.type) == (3, None, False, "exit")

    info = p.info()
    assert (info.state, info.exit_code, info.signal, info.timed_out) == ("exited", 3, None, False)
    assert (info.stdout_bytes, info.stderr_bytes) == (len(out), len(err))
    assert isinstance(info.started_at, datetime) and info.ended_at is not None and info.ended_at >= info.started_at
    assert session.processes.get(p.exec_id).info() == info

    # After the end: the ring replays whole (in its own chunks), then the exit; from a cursor, exactly what
    # came after it.
    replay_out, replay_err, _, replay_ex = _split(list(p.output()))
    assert (replay_out, replay_err, replay_ex) == (out, err, ex)
    mid = chunks[len(chunks) // 2]
    rest_out, _, _, rest_ex = _split(list(p.output(offset=mid.cursor)), mid.cursor)
    assert bytes(out[: int(mid.cursor.split(",")[0])]) + rest_out == out and rest_ex == ex
    assert p.wait() == ex  # an ended process: at once


def test_output_without_follow_ends_at_what_is_kept_while_it_runs(session: berth.Session) -> None:
    p = session.exec(["sh", "-c", "echo first; exec sleep 100"], background=True)
    try:
        assert wait_until(lambda: p.info().stdout_bytes == 6, timeout=30)
        events = list(p.output())
        assert [(e.type, e.data) for e in events if isinstance(e, berth.ProcessOutput)] == [("stdout", b"first\n")]
        assert not any(isinstance(e, berth.ProcessExit) for e in events)  # still running: no exit
    finally:
        p.kill("KILL")


def test_kill_ends_it_with_the_signal(session: berth.Session) -> None:
    p = session.exec(["sleep", "100"], background=True)
    k = p.kill()
    assert (k.exec_id, k.signal, k.signalled) == (p.exec_id, 15, True)
    ex = p.wait()
    assert ex.signal == 15 and not ex.timed_out
    info = p.info()
    assert (info.state, info.signal) == ("exited", 15)
    assert p.kill("KILL").signalled is False  # already ended: nothing signalled


def test_unknown_ids_and_bad_arguments(session: berth.Session) -> None:
    ghost = session.processes.get("exe_00000000000000000000")
    with pytest.raises(berth.NotFoundError):
        ghost.info()
    with pytest.raises(berth.NotFoundError):
        list(ghost.output(follow=True))
    with pytest.raises(berth.NotFoundError):
        ghost.kill()
    with pytest.raises(berth.InvalidArgumentError) as no_stdin:
        session.exec(["cat"], background=True, stdin=b"x")  # type: ignore[call-overload]
    assert no_stdin.value.field == "stdin"
    p = session.exec(["true"], background=True)
    with pytest.raises(berth.InvalidArgumentError) as bad_offset:
        list(p.output(offset="x,y"))
    assert bad_offset.value.status == 400 and bad_offset.value.field == "offset"
    assert p.wait().exit_code == 0


class _CuttableProxy:
    """A TCP relay on 127.0.0.1 in front of the server whose open connections can be cut mid-stream."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self._target = (host, int(port))
        self._lsock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._lsock.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self.accepted = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._lsock.accept()
            except OSError:
                return
            u = socket.create_connection(self._target)
            with self._lock:
                self.accepted += 1
                self._open += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._lsock.close()
        self.cut()


@pytest.fixture()
def proxy(server: Server) -> Iterator[_CuttableProxy]:
    px = _CuttableProxy(server.url)
    try:
        yield px
    finally:
        px.close()


def test_follow_resumes_from_its_cursor_when_the_connection_is_cut(server: Server, session: berth.Session, proxy: _CuttableProxy) -> None:
    lines = [f"n{i}\n" for i in range(1, 31)]
    session.exec(["sh", "-c", "for i in $(seq 1 30); do echo n$i; sleep 0.1; done"], background=True)
    with berth.Berth(proxy.url, server.root_key) as via:
        p = via.sessions.get(session.id).processes.list()[0]
        handle = via.sessions.get(session.id).processes.get(p.exec_id)
        events: list[berth.ProcessEvent] = []
        before = proxy.accepted
        for ev in handle.output(follow=True):
            events.append(ev)
            if len(events) in (3, 12):
                proxy.cut()  # twice, mid-stream: lines in flight are lost on the wire, not to the reader
        out, _, _, ex = _split(events)
    assert out.decode() == "".join(lines)
    assert ex is not None and ex.exit_code == 0
    assert proxy.accepted - before >= 2  # a new connection after each cut


@pytest.mark.asyncio
async def test_the_async_client(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256, objective="pytest async processes") as s:
        p = await s.exec(TICKER, background=True)
        assert isinstance(p, berth.AsyncBackgroundProcess) and isinstance(p.pid, int)
        assert [x.state for x in await s.processes.list() if x.exec_id == p.exec_id] == ["running"]
        out, err, _, ex = _split([ev async for ev in p.output(follow=True)])
        assert (out.decode(), err, ex) == ("".join(LINES), b"done\n", berth.ProcessExit(exit_code=3, signal=None, timed_out=False))
        assert _split([ev async for ev in p.output()])[:2] == (out, err)
        assert (await s.processes.get(p.exec_id).info()).exit_code == 3

        sleeper = await s.exec(["sleep", "100"], background=True)
        assert (await sleeper.kill("TERM")).signalled
        assert (await sleeper.wait()).signal == 15
        with pytest.raises(berth.NotFoundError):
            await s.processes.get("exe_00000000000000000000").info()
        with pytest.raises(berth.NotFoundError):
            [ev async for ev in s.processes.get("exe_00000000000000000000").output()]
