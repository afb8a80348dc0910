"""Lifecycle verbs, snapshots and forks through the sync client."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import berth


def test_pause_resume_hibernate_and_a_run_wakes_the_machine(client: berth.Berth, session: berth.Session) -> None:
    session.run(["sh", "-c", "echo kept > /tmp/state"])
    assert session.pause().state == "paused"
    assert session.state == "paused"
    with pytest.raises(berth.InvalidStateError):
        session.pause()
    assert session.resume().state == "running"

    assert session.hibernate().state == "hibernated"
    assert client.sessions.get(session.id).state == "hibernated"
    # A command on a hibernated machine wakes it, with its memory and disk as they were.
    assert session.run(["cat", "/tmp/state"]).stdout == "kept\n"
    assert session.refresh().state == "running"

    session.hibernate()
    assert session.wake().state == "running"
    assert session.files.read("/tmp/state") == b"kept\n"
    assert session.refresh().metering.state_seconds.get("hibernated", 0) > 0


def test_terminate_is_terminal(client: berth.Berth) -> None:
    with client.sessions.create(memory_mb=256) as s:
        s.terminate()  # leaving the block after an explicit terminate is fine
        assert s.state == "terminated"
    with pytest.raises(berth.InvalidStateError):
        s.run(["true"])
    with pytest.raises(berth.InvalidStateError):
        s.wake()


def test_snapshot_and_fork_three_branches_that_diverge(client: berth.Berth, session: berth.Session) -> None:
    session.run(["sh", "-c", "echo base > /root/log"])
    snap = session.snapshot("step-1")
    assert snap.snapshot_id.startswith("snp_") and snap.id == snap.snapshot_id
    assert (snap.name, snap.session_id, snap.kind) == ("step-1", session.id, "named")
    assert client.snapshots.get(snap.snapshot_id) == snap
    assert snap.snapshot_id in [x.snapshot_id for x in client.snapshots.list(session_id=session.id)]

    branches = client.snapshots.fork(snap.snapshot_id, count=3)
    try:
        assert len(branches) == 3 and len({b.id for b in branches}) == 3
        assert all(b.agent_token and b.info.parent_snapshot_id == snap.snapshot_id and b.state == "running" for b in branches)

        def act(i: int) -> str:
            return branches[i].run(["sh", "-c", f"echo branch-{i} >> /root/log; cat /root/log"]).stdout

        with ThreadPoolExecutor(3) as pool:
            outs = list(pool.map(act, range(3)))
        assert outs == [f"base\nbranch-{i}\n" for i in range(3)]
        # The source and the other branches are untouched by each branch's action.
        assert session.files.read("/root/log") == b"base\n"
    finally:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda b: b.terminate(), branches))
    client.snapshots.delete(snap.snapshot_id)
    with pytest.raises(berth.NotFoundError):
        client.snapshots.get(snap.snapshot_id)
    with pytest.raises(berth.InvalidArgumentError) as e:
        client.snapshots.fork(snap.snapshot_id, count=100)
    assert e.value.field == "count"
