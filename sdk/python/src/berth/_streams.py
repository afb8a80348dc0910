"""Bytes in and out: request bodies from what the SDK accepts (bytes, str, a file, an iterator), and the
exec stream's NDJSON lines."""

from __future__ import annotations

import asyncio
import json
from typing import IO, Any, AsyncIterable, AsyncIterator, Iterable, Iterator, Union

from ._errors import BerthError, InvalidArgumentError

#: Bytes a file-like source is read in (and the size of upload chunks it produces).
CHUNK = 256 * 1024

#: What ``files.write`` and exec ``stdin`` accept on the sync client.
BytesSource = Union[bytes, bytearray, memoryview, str, IO[bytes], IO[str], Iterable[bytes], Iterable[str]]
#: The async client also takes async iterables.
AsyncBytesSource = Union[BytesSource, AsyncIterable[bytes], AsyncIterable[str]]


def _chunk(c: Any) -> bytes:
    if isinstance(c, str):
        return c.encode("utf-8")
    if isinstance(c, (bytes, bytearray, memoryview)):
        return bytes(c)
    raise InvalidArgumentError(f"data: an iterator must yield bytes or str, got {type(c).__name__}", details={"field": "data"})


def _whole(data: Any) -> bytes | None:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return None


def sync_body(data: BytesSource) -> bytes | Iterator[bytes]:
    """The whole body, or an iterator pulled only as fast as the connection drains."""
    whole = _whole(data)
    if whole is not None:
        return whole
    if hasattr(data, "read"):
        f: Any = data

        def read_file() -> Iterator[bytes]:
            while True:
                c = f.read(CHUNK)
                if not c:
                    return
                yield _chunk(c)

        return read_file()
    if isinstance(data, Iterable):
        return (c for c in (_chunk(x) for x in data) if c)
    raise InvalidArgumentError(f"data: expected bytes, str, a file or an iterator, got {type(data).__name__}", details={"field": "data"})


def async_body(data: AsyncBytesSource) -> bytes | AsyncIterator[bytes]:
    whole = _whole(data)
    if whole is not None:
        return whole
    if hasattr(data, "read"):
        f: Any = data

        async def read_file() -> AsyncIterator[bytes]:
            while True:
                c = await asyncio.to_thread(f.read, CHUNK)  # a disk read must not stall the event loop
                if not c:
                    return
                yield _chunk(c)

        return read_file()
    if isinstance(data, AsyncIterable):
        src: AsyncIterable[Any] = data

        async def from_async() -> AsyncIterator[bytes]:
            async for x in src:
                c = _chunk(x)
                if c:
                    yield c

        return from_async()
    if isinstance(data, Iterable):
        items: Iterable[Any] = data

        async def from_sync() -> AsyncIterator[bytes]:
            for x in items:
                c = _chunk(x)
                if c:
                    yield c

        return from_sync()
    raise InvalidArgumentError(f"data: expected bytes, str, a file or an iterator, got {type(data).__name__}", details={"field": "data"})


def decode_line(text: str) -> dict[str, Any]:
    """One exec stream line, checked; anything the server never sends is an internal error."""
    try:
        o = json.loads(text)
    except ValueError:
        raise BerthError("malformed exec stream line (not JSON)", code="internal") from None
    t = o.get("type") if isinstance(o, dict) else None
    ok = (
        (t == "started" and isinstance(o.get("execId"), str))
        or (t in ("stdout", "stderr") and isinstance(o.get("data"), str))
        or (t == "exit" and isinstance(o.get("code"), int) and isinstance(o.get("timedOut"), bool))
        or (t == "error" and isinstance(o.get("error"), dict))
        or t == "ping"
    )
    if not ok:
        raise BerthError(f"unexpected exec stream line: {text[:200]}", code="internal")
    return o  # type: ignore[no-any-return]


def decode_process_line(text: str) -> dict[str, Any]:
    """One line of a background command's output stream, checked like :func:`decode_line`."""
    try:
        o = json.loads(text)
    except ValueError:
        raise BerthError("malformed process output line (not JSON)", code="internal") from None
    t = o.get("type") if isinstance(o, dict) else None
    ok = (
        (t in ("stdout", "stderr") and isinstance(o.get("data"), str) and isinstance(o.get("offset"), int) and isinstance(o.get("cursor"), str))
        or (t == "exit" and isinstance(o.get("code"), int))
        or (t == "end" and isinstance(o.get("cursor"), str))
        or (t == "error" and isinstance(o.get("error"), dict))
        or t == "ping"
    )
    if not ok:
        raise BerthError(f"unexpected process output line: {text[:200]}", code="internal")
    return o  # type: ignore[no-any-return]
