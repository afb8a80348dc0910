"""Terminals through the sync client, against the real server and a gVisor sandbox: create (the screen,
then live output), write, resize seen by stty, the exit code; a watcher's input refused by name; kill."""

from __future__ import annotations

import berth


def test_create_write_resize_wait_and_watcher_refused(session: berth.Session) -> None:
    t = session.terminals.create(cols=90, rows=20, command=["sh", "-c", "read a; stty size; echo \"got $a\"; read b; exit 6"])
    assert t.role == "controller"
    w = session.terminals.attach(t.term_id, mode="watch")
    assert w.role == "watcher"
    w.write(b"from-watcher\r")
    t.resize(91, 21)
    t.write("abc\r")
    seen = b""
    for chunk in t.read():
        seen += chunk
        if b"got abc" in seen:
            break
    assert b"21 91\r\ngot abc" in seen
    t.write("x\r")
    assert t.wait() == {"code": 6, "signal": None}
    w.wait()
    assert any(e.code == "forbidden" and (e.details or {}).get("reason") == "not_controller" for e in w.errors)
    assert [x for x in session.terminals.list() if x["termId"] == t.term_id][0]["exitCode"] == 6
    k = session.terminals.create(command=["sleep", "600"])
    assert k.kill(9)["signalled"] is True
    assert k.wait()["code"] == 137
    assert session.terminals.recording(t.term_id).startswith('{"version":2')
