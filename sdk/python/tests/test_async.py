"""The async client against the real server: the same round trips, gathered in parallel, and asyncio
cancellation (a cancelled task's command is killed, its upload never appears)."""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import io
import os
from typing import AsyncIterator

import pytest

import berth
from conftest import Server
from test_errors import _RawServer

MB = 1024 * 1024
pytestmark = pytest.mark.asyncio


async def test_create_run_exec_and_stdin(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256, env={"A": "b"}, metadata={"k": "v"}) as s:
        assert isinstance(s, berth.AsyncSession) and s.state == "running" and s.agent_token
        r = await s.run(["sh", "-c", "echo $A; echo err >&2; exit 2"])
        assert (r.stdout, r.stderr, r.exit_code) == ("b\n", "err\n", 2)
        ex = await s.exec(["sh", "-c", "echo one; sleep 0.1; echo two >&2"])
        assert [(e.type, e.data) async for e in ex] == [("stdout", b"one\n"), ("stderr", b"two\n")]
        assert (await ex.wait()).exit_code == 0

        async def chunks() -> AsyncIterator[bytes]:
            yield b"async "
            await asyncio.sleep(0.05)
            yield b"stdin"

        assert (await s.run(["cat"], stdin=chunks())).stdout == "async stdin"
        assert (await s.run(["cat"], stdin=io.BytesIO(b"file"))).stdout == "file"
        assert (await s.run(["sleep", "20"], timeout=0.3)).timed_out
        async with await s.exec(["sh", "-c", "read a; echo got $a"], stdin=True) as piped:
            assert (await piped.write_stdin("line\n", close=True)).closed
            assert [e.text async for e in piped] == ["got line\n"]
            assert (await piped.wait()).exit_code == 0
        killed = await s.exec(["sleep", "30"])
        assert await killed.kill("TERM") == 15
        assert (await killed.wait()).signal == 15
        got = await aclient.sessions.get(s.id)
        assert got.info.metadata == {"k": "v"}
        assert s.id in [x.id for x in await aclient.sessions.list(states="running")]
    assert (await aclient.sessions.get(s.id)).state == "terminated"


async def test_files_stream_20_mb_both_ways(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256) as s:
        h = hashlib.sha256()

        async def source() -> AsyncIterator[bytes]:
            for _ in range(20):
                c = os.urandom(MB)
                h.update(c)
                yield c
                await asyncio.sleep(0)

        assert (await s.files.write("/root/big", source(), mode=0o640)).bytes == 20 * MB
        back = hashlib.sha256()
        n = 0
        async for c in s.files.stream("/root/big"):
            back.update(c)
            n += 1
        assert back.hexdigest() == h.hexdigest() and n > 1
        assert (await s.files.stat("/root/big")).mode == 0o640
        await s.files.write("/root/t", "tëxt")
        assert await s.files.read_text("/root/t") == "tëxt"
        await s.files.mkdir("/root/d")
        assert {e.name for e in await s.files.list("/root")} >= {"big", "t", "d"}
        await s.files.remove("/root/d")
        assert not await s.files.exists("/root/d")
        with pytest.raises(berth.NotFoundError):
            await s.files.read("/root/missing")


async def test_hibernate_then_run_wakes_and_fork_three_in_parallel(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256) as s:
        await s.run(["sh", "-c", "echo base > /root/log"])
        assert (await s.hibernate()).state == "hibernated"
        assert (await s.run(["cat", "/root/log"])).stdout == "base\n"
        assert (await s.refresh()).state == "running"
        assert (await s.pause()).state == "paused"
        assert (await s.resume()).state == "running"
        snap = await s.snapshot("async-base")
        branches = await aclient.snapshots.fork(snap.snapshot_id, count=3)
        try:
            outs = await asyncio.gather(*(b.run(["sh", "-c", f"echo {i} >> /root/log; cat /root/log"]) for i, b in enumerate(branches)))
            assert [o.stdout for o in outs] == [f"base\n{i}\n" for i in range(3)]
        finally:
            await asyncio.gather(*(b.terminate() for b in branches))
        assert snap.snapshot_id in [x.snapshot_id for x in await aclient.snapshots.list()]
        await aclient.snapshots.delete(snap.snapshot_id)
        with pytest.raises(berth.NotFoundError):
            await aclient.snapshots.get(snap.snapshot_id)


async def test_gate_allow_deny_pending_approve(aclient: berth.AsyncBerth, server: Server) -> None:
    t = await aclient.tenants.create(f"async-{os.urandom(3).hex()}")
    async with berth.AsyncBerth(server.url, t.api_key) as op:
        await op.policy.set('permit (principal, action == Action::"fs.read", resource);\n@approval("required")\npermit (principal, action == Action::"fs.write", resource);')
        async with await op.sessions.create(memory_mb=256) as s:
            assert {x.name for x in await op.tools.list(s.id)} >= {"fs.read", "fs.write"}
            assert (await op.tools.call(s.id, "fs.read", {"path": "/etc/hostname"})).decision == "allow"
            with pytest.raises(berth.DeniedError) as d:
                await op.tools.call(s.id, "fs.list", {"path": "/"})
            assert (d.value.stage, d.value.code) == ("policy", "policy_denied")
            with pytest.raises(berth.ApprovalPending) as p:
                await op.tools.call(s.id, "fs.write", {"path": "/root/a", "content": "yes"})
            assert [a.id for a in await op.approvals.list(states=["pending"], session_id=s.id)] == [p.value.approval_id]
            done = await op.approvals.approve(p.value.approval_id)
            assert done.result is not None and done.result.decision == "allow"
            assert (await op.approvals.get(s.id, p.value.approval_id)).status == done.status
            assert await s.files.read("/root/a") == b"yes"
            assert (await op.gate.get(s.id)).session_id == s.id
            assert (await op.plans.get(s.id)).plan is None
    assert (await aclient.audit.verify()).ok


async def test_errors_are_the_same_classes(aclient: berth.AsyncBerth, server: Server) -> None:
    with pytest.raises(berth.NotFoundError):
        await aclient.sessions.get("ses_00000000000000000000")
    with pytest.raises(berth.InvalidArgumentError) as e:
        await aclient.sessions.create(cpus=1000)
    assert e.value.field == "cpus"
    with pytest.raises(berth.UnauthenticatedError):
        async with berth.AsyncBerth(server.url) as anon:
            await anon.sessions.list()
    silent = _RawServer(None)
    try:
        with pytest.raises(berth.TimeoutError):
            async with berth.AsyncBerth(silent.url, "x", timeout=0.3) as slow:
                await slow.tenants.list()
    finally:
        silent.close()
    with pytest.raises(berth.ConnectionError):
        async with berth.AsyncBerth("http://127.0.0.1:1", "x") as dead:
            await dead.sessions.list()


async def test_cancelling_a_task_kills_its_command(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256) as s:
        task = asyncio.create_task(s.run(["sh", "-c", "sleep 3; echo late > /root/late"]))
        await asyncio.sleep(0.7)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # asyncio.wait_for's deadline is a cancellation too.
        with pytest.raises(builtins.TimeoutError):
            await asyncio.wait_for(s.run(["sh", "-c", "sleep 3; echo late > /root/late2"]), 0.7)
        await asyncio.sleep(4)
        assert not await s.files.exists("/root/late")
        assert not await s.files.exists("/root/late2")
        assert (await s.run(["echo", "usable"])).stdout == "usable\n"


async def test_leaving_the_loop_early_kills_the_command(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256) as s:

        async def alive(pattern: str) -> bool:
            script = f"for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q '{pattern}'"
            return (await s.run(["sh", "-c", script])).exit_code == 0

        async def gone(pattern: str) -> bool:
            for _ in range(100):
                if not await alive(pattern):
                    return True
                await asyncio.sleep(0.1)
            return False

        async with await s.exec(["sh", "-c", "echo started; exec sleep 34"]) as ex:
            assert await alive("slee[p] 34")
            async for ev in ex:
                assert ev.text == "started\n"
                break
        assert await gone("slee[p] 34")
        with pytest.raises(berth.OperationCancelled):
            await ex.wait()

        held = await s.exec(["sh", "-c", "echo started; exec sleep 35"])
        events = held.__aiter__()
        assert (await events.__anext__()).text == "started\n"
        with pytest.raises(berth.OperationCancelled):
            await held.wait()  # the loop was left: wait() drops the stream
        assert await gone("slee[p] 35")


async def test_a_cancelled_upload_leaves_no_file(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256) as s:
        sent = asyncio.Event()

        async def slow() -> AsyncIterator[bytes]:
            yield os.urandom(MB)
            sent.set()
            await asyncio.sleep(30)
            yield b"never"

        task = asyncio.create_task(s.files.write("/root/partial", slow()))
        await sent.wait()
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)
        assert not await s.files.exists("/root/partial")
