"""Desktops: ``create(desktop=…)`` reaches the server, and ``session.desktop`` records the screen of a real
gVisor sandbox into an MPEG-TS video (sync), refuses a second recording while one runs, and refuses a
session without a desktop (sync and async)."""

from __future__ import annotations

import time

import pytest

import berth

MIB = 1024 * 1024


def test_a_desktop_session_records_its_screen(client: berth.Berth) -> None:
    with client.sessions.create(desktop={"width": 640, "height": 480}, memory_mb=512, objective="pytest desktop") as s:
        assert s.info.settings.desktop == {"width": 640, "height": 480}
        info = s.desktop.info()
        assert (info.session_id, info.width, info.height) == (s.id, 640, 480)
        assert info.recording.exec_id is None and not info.recording.recording

        started = s.desktop.record(max_bytes=8 * MIB)
        assert started.recording and started.cap == 8 * MIB and started.fps == 5
        with pytest.raises(berth.ConflictError):
            s.desktop.record()
        assert s.run(["xsetroot", "-solid", "red"]).exit_code == 0
        time.sleep(1.5)
        stopped = s.desktop.stop_recording()
        assert stopped.stopped is True and not stopped.recording and stopped.bytes > 0
        assert started.started_at is not None and stopped.ended_at is not None and stopped.ended_at >= started.started_at
        assert s.desktop.stop_recording().stopped is False

        video = s.desktop.recording()
        assert len(video) > 0 and len(video) % 188 == 0
        assert all(video[i] == 0x47 for i in range(0, len(video), 188))
        assert b"".join(s.desktop.recording_stream()) == video


def test_a_session_without_a_desktop_is_refused(session: berth.Session) -> None:
    assert session.info.settings.desktop is None
    with pytest.raises(berth.InvalidStateError) as e:
        session.desktop.info()
    assert e.value.details["reason"] == "no_desktop"
    with pytest.raises(berth.InvalidArgumentError):
        session.desktop.record(max_bytes=0)


@pytest.mark.asyncio
async def test_async_desktop_refuses_a_session_without_one(aclient: berth.AsyncBerth) -> None:
    async with await aclient.sessions.create(memory_mb=256, objective="pytest desktop async") as s:
        with pytest.raises(berth.InvalidStateError) as e:
            await s.desktop.record()
        assert e.value.details["reason"] == "no_desktop"
        with pytest.raises(berth.InvalidStateError):
            await s.desktop.recording()
