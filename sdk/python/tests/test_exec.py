"""Sessions and commands through the sync client, against the real server and gVisor sandboxes."""

from __future__ import annotations

import io
import time
from datetime import datetime, timezone

import pytest

import berth
from conftest import wait_until


def test_create_takes_every_field_the_api_takes(client: berth.Berth) -> None:
    with client.sessions.create(
        objective="every field",
        memory_mb=320,
        cpus=0.5,
        idle_timeout_s=3600,
        disk_mb=96,
        env={"GREETING": "hi"},
        backend="gvisor",
        metadata={"run": "pytest", "step": "37"},
        tenant_id=None,
    ) as s:
        assert s.id.startswith("ses_")
        assert s.agent_token is not None and s.agent_token.startswith("bta_")
        info = s.info
        assert (info.state, info.backend, info.objective) == ("running", "gvisor", "every field")
        assert (info.settings.memory_mb, info.settings.disk_mb, info.settings.cpus, info.settings.idle_timeout_s) == (320, 96, 0.5, 3600)
        assert info.settings.env == ["GREETING"]
        assert info.metadata == {"run": "pytest", "step": "37"}
        assert isinstance(info.created_at, datetime) and info.created_at.tzinfo is not None
        assert abs((datetime.now(timezone.utc) - info.created_at).total_seconds()) < 120
        assert "agentToken" not in info.raw
        assert s.run(["sh", "-c", "echo $GREETING"]).stdout == "hi\n"

        got = client.sessions.get(s.id)
        assert got.id == s.id and got.agent_token is None
        assert got.info.metering.exec_count == 1
        assert s.id in [x.id for x in client.sessions.list()]
        assert s.id in [x.id for x in client.sessions.list(states=["running"])]
        assert s.id not in [x.id for x in client.sessions.list(states=["paused", "hibernated"])]
    assert s.state == "terminated"
    assert client.sessions.get(s.id).state == "terminated"


def test_run_collects_stdout_stderr_and_exit_code(session: berth.Session) -> None:
    r = session.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_code, r.signal, r.timed_out, r.ok) == (3, None, False, False)
    assert (r.stdout, r.stderr) == ("out\n", "err\n")
    assert (r.stdout_bytes, r.stderr_bytes) == (b"out\n", b"err\n")
    assert session.run(["pwd"], cwd="/tmp").stdout == "/tmp\n"
    assert session.run(["sh", "-c", "echo $X"], env={"X": "over"}).stdout == "over\n"
    binary = session.run(["sh", "-c", "printf '\\000\\001\\377'"])
    assert binary.stdout_bytes == b"\x00\x01\xff"


def test_exec_streams_events_in_order_and_wait_gives_the_exit(session: berth.Session) -> None:
    ex = session.exec(["sh", "-c", "echo tick 1; sleep 0.2; echo tock >&2; sleep 0.2; echo tick 2"])
    assert ex.exec_id.startswith("exe_")
    seen = [(e.type, e.text) for e in ex]
    assert seen == [("stdout", "tick 1\n"), ("stderr", "tock\n"), ("stdout", "tick 2\n")]
    assert ex.wait() == berth.ExecResult(exit_code=0, signal=None, timed_out=False)
    with pytest.raises(berth.InvalidStateError):
        iter(ex)


def test_wait_without_iterating_drains_the_output(session: berth.Session) -> None:
    ex = session.exec(["sh", "-c", "seq 1 20000; exit 4"])
    assert ex.wait().exit_code == 4


def test_command_timeout_reports_timed_out(session: berth.Session) -> None:
    t0 = time.monotonic()
    r = session.run(["sleep", "30"], timeout=0.5)
    assert r.timed_out and r.signal == 9
    assert time.monotonic() - t0 < 15


def test_stdin_from_bytes_str_file_iterator_and_a_pipe(session: berth.Session) -> None:
    assert session.run(["cat"], stdin=b"\x00bytes\xff").stdout_bytes == b"\x00bytes\xff"
    assert session.run(["cat"], stdin="héllo").stdout == "héllo"
    assert session.run(["cat"], stdin=io.BytesIO(b"from a file")).stdout == "from a file"

    def gen():  # type: ignore[no-untyped-def]
        yield b"one "
        time.sleep(0.1)
        yield "two"

    assert session.run(["cat"], stdin=gen()).stdout == "one two"

    with session.exec(["sh", "-c", "read a; echo got $a; read b; echo got $b"], stdin=True) as ex:
        events = iter(ex)
        assert ex.write_stdin("first\n") == berth.StdinWrite(bytes=6, closed=False)
        assert next(events).text == "got first\n"
        ex.write_stdin(b"second\n", close=True)
        assert next(events).text == "got second\n"
        assert list(events) == []
        assert ex.wait().exit_code == 0


def test_kill_signals_the_command(session: berth.Session) -> None:
    ex = session.exec(["sleep", "30"])
    assert ex.kill("SIGTERM") == 15
    assert ex.wait() == berth.ExecResult(exit_code=143, signal=15, timed_out=False)
    ex2 = session.exec(["sleep", "30"])
    assert ex2.kill() == 9
    assert ex2.wait().signal == 9


def _alive(session: berth.Session, pattern: str) -> bool:
    """Whether a process whose command line matches ``pattern`` (a grep regex) runs in the session."""
    script = f"for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q '{pattern}'"
    return session.run(["sh", "-c", script]).exit_code == 0


def test_leaving_the_loop_early_kills_the_command(session: berth.Session) -> None:
    ex = session.exec(["sh", "-c", "echo started; exec sleep 31"])
    assert _alive(session, "slee[p] 31")
    for ev in ex:
        assert ev.text == "started\n"
        break
    with pytest.raises(berth.OperationCancelled):
        ex.wait()
    assert wait_until(lambda: not _alive(session, "slee[p] 31"))


def test_keyboard_interrupt_in_the_loop_kills_the_command_and_leaves_no_half_state(session: berth.Session) -> None:
    # The command would write /tmp/late after 3 s; a Ctrl-C while reading its output must stop it.
    ex = session.exec(["sh", "-c", "echo go; sleep 3; echo late > /tmp/late"])  # held: no help from the GC
    with pytest.raises(KeyboardInterrupt):
        for _ in ex:
            raise KeyboardInterrupt
    with pytest.raises(berth.OperationCancelled):
        ex.wait()
    time.sleep(4)
    assert not session.files.exists("/tmp/late")
    assert session.run(["echo", "still usable"]).stdout == "still usable\n"


def test_run_kills_a_command_whose_output_exceeds_the_limit(session: berth.Session) -> None:
    with pytest.raises(berth.PayloadTooLargeError) as e:
        session.run(["sh", "-c", "yes | head -c 5000000; sleep 30"], max_output_bytes=100_000)
    assert e.value.code == "payload_too_large"


def test_argv_must_be_a_list(session: berth.Session) -> None:
    with pytest.raises(berth.InvalidArgumentError) as e:
        session.run("echo hi")  # type: ignore[arg-type]
    assert e.value.field == "argv"


def test_a_quiet_command_keeps_its_stream_alive_with_invisible_pings(session: berth.Session) -> None:
    # Silent for 25 s under an 18 s request_timeout: only the server's ping line (every 15 s) keeps the
    # stream from timing out, and pings never show up as events.
    ex = session.exec(["sh", "-c", "sleep 25; echo done"], request_timeout=18)
    assert [e.data for e in ex] == [b"done\n"]
    assert ex.wait().exit_code == 0
