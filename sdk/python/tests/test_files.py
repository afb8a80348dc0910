"""Files through the sync client: binary-safe, streamed both ways, atomic."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

import berth

MB = 1024 * 1024


def test_round_trip_is_binary_safe_and_write_takes_every_source(session: berth.Session) -> None:
    every_byte = bytes(range(256)) * 1000 + b"\r\n\x00"
    assert session.files.write("/root/blob", every_byte, mode=0o600) == berth.FileWrite(path="/root/blob", bytes=len(every_byte))
    assert session.files.read("/root/blob") == every_byte
    st = session.files.stat("/root/blob")
    assert (st.path, st.type, st.size, st.mode) == ("/root/blob", "file", len(every_byte), 0o600)

    session.files.write("/root/text", "héllo wörld")
    assert session.files.read_text("/root/text") == "héllo wörld"
    session.files.write("/root/file", io.BytesIO(b"from a file object"))
    assert session.files.read("/root/file") == b"from a file object"
    session.files.write("/root/textfile", io.StringIO("from a text file"))
    assert session.files.read("/root/textfile") == b"from a text file"
    session.files.write("/root/iter", (c for c in [b"a", "b", bytearray(b"c")]))
    assert session.files.read("/root/iter") == b"abc"
    session.files.write("/root/empty", b"")
    assert session.files.read("/root/empty") == b""
    # What the SDK wrote is what a command inside the machine sees.
    assert session.run(["sha256sum", "/root/blob"]).stdout.split()[0] == hashlib.sha256(every_byte).hexdigest()


def test_a_20_mb_file_streams_in_from_a_generator_and_out_in_chunks(session: berth.Session) -> None:
    produced = []

    def source():  # type: ignore[no-untyped-def]
        for i in range(20):
            chunk = os.urandom(MB)
            produced.append(chunk)
            yield chunk

    assert session.files.write("/root/big.bin", source()).bytes == 20 * MB
    want = hashlib.sha256(b"".join(produced)).hexdigest()
    assert session.run(["sha256sum", "/root/big.bin"]).stdout.split()[0] == want

    h = hashlib.sha256()
    chunks = 0
    for c in session.files.stream("/root/big.bin"):
        h.update(c)
        chunks += 1
    assert h.hexdigest() == want
    assert chunks > 1
    assert hashlib.sha256(session.files.read("/root/big.bin")).hexdigest() == want
    with pytest.raises(berth.PayloadTooLargeError):
        session.files.read("/root/big.bin", max_bytes=MB)


def test_list_stat_mkdir_remove(session: berth.Session) -> None:
    session.files.mkdir("/root/d/e", parents=True)
    session.files.write("/root/d/e/f.txt", "x")
    with pytest.raises(berth.BerthError):
        session.files.mkdir("/root/x/y")  # no parents
    names = sorted(e.name for e in session.files.list("/root/d"))
    assert names == ["e"]
    entry = session.files.list("/root/d/e")[0]
    assert (entry.name, entry.type, entry.size) == ("f.txt", "file", 1)
    assert session.files.stat("/root/d").type == "dir"
    assert session.files.exists("/root/d/e/f.txt")
    with pytest.raises(berth.BerthError):
        session.files.remove("/root/d")  # not empty, not recursive
    session.files.remove("/root/d", recursive=True)
    assert not session.files.exists("/root/d")
    with pytest.raises(berth.NotFoundError):
        session.files.stat("/root/d")
    with pytest.raises(berth.NotFoundError):
        session.files.read("/root/missing")
    with pytest.raises(berth.InvalidArgumentError) as e:
        session.files.read("relative/path")
    assert e.value.field == "path"


def test_an_interrupted_upload_leaves_no_file(session: berth.Session) -> None:
    session.files.write("/root/keep.bin", b"old content")

    def source():  # type: ignore[no-untyped-def]
        yield os.urandom(MB)
        yield os.urandom(MB)
        raise KeyboardInterrupt  # Ctrl-C halfway through the upload

    with pytest.raises(KeyboardInterrupt):
        session.files.write("/root/new.bin", source())
    with pytest.raises(KeyboardInterrupt):
        session.files.write("/root/keep.bin", source())
    assert not session.files.exists("/root/new.bin")
    assert session.files.read("/root/keep.bin") == b"old content"
