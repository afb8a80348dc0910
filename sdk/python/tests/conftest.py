"""A real Berth server for the SDK's tests: ``bin/berth serve --port 0`` on 127.0.0.1 with a fresh data
directory and the repository's image cache, real SQLite and real gVisor sandboxes. One server per test
run; every session a test creates is terminated when the run ends, and the server is stopped."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import pytest_asyncio

import berth

REPO = Path(__file__).resolve().parents[3]
#: Seconds the server may take to listen (a first start on a fresh machine builds the image: ~1 min).
START_TIMEOUT_S = 300


def readme_python_blocks() -> dict[str, list[str]]:
    """The ```python blocks of sdk/python/README.md and of the repository README's "Python SDK" section (up
    to the next ``## `` heading): test_readme.py runs them all, test_package.py type-checks them."""
    sdk = (REPO / "sdk" / "python" / "README.md").read_text()
    main = (REPO / "README.md").read_text()
    start = main.index("\n### Python SDK\n")
    end = main.find("\n## ", start)
    section = main[start : end if end >= 0 else len(main)]

    def blocks(text: str) -> list[str]:
        return re.findall(r"```python\n(.*?)```", text, flags=re.S)

    return {"sdk": blocks(sdk), "main": blocks(section)}


@dataclass
class Server:
    url: str
    root_key: str
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log: list[str]


def _start_server() -> Server:
    data_dir = Path(tempfile.mkdtemp(prefix="berth-pytest-"))
    proc = subprocess.Popen(
        [str(REPO / "bin" / "berth"), "serve", "--port", "0", "--host", "127.0.0.1", "--data", str(data_dir), "--image-cache", str(REPO / ".berth" / "images")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a Ctrl-C at the terminal reaches pytest, which then stops the server itself
    )
    log: list[str] = []
    found: dict[str, str] = {}
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            log.append(line)
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if isinstance(o, dict) and o.get("msg") == "ready":
                found["url"] = o["url"]
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(START_TIMEOUT_S) or "url" not in found:
        proc.kill()
        proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
        raise RuntimeError("berth serve did not start:\n" + "\n".join(log[-40:]))
    root_key = (data_dir / "root.key").read_text().strip()
    return Server(url=found["url"], root_key=root_key, data_dir=data_dir, proc=proc, log=log)


def _sandbox_pids(data_dir: Path) -> dict[int, str]:
    """Host processes (runsc sandboxes and gofers) started under this server's data directory."""
    out: dict[int, str] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if str(data_dir) in cmd and "runsc" in cmd:
            out[int(p.name)] = cmd
    return out


def _stop_server(s: Server) -> None:
    leaked: dict[int, str] = {}
    why: list[str] = []
    try:
        with berth.Berth(s.url, s.root_key, timeout=30) as b:
            live = b.sessions.list(states=["creating", "running", "paused", "hibernating", "hibernated", "waking", "failed"])
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda x: _quiet(x.terminate), live))
            # Every session is terminated now: a runsc process still there is a sandbox the server lost.
            end = time.monotonic() + 10
            while (leaked := _sandbox_pids(s.data_dir)) and time.monotonic() < end:
                time.sleep(0.2)
            for sid in sorted({m.group(1) for c in leaked.values() if (m := re.search(r"sandboxes/(ses_[a-z0-9]+)", c))}):
                try:
                    i = b.sessions.get(sid).info
                    why.append(f"{sid}: {i.state} objective={i.objective!r} metadata={i.metadata} parent={i.parent_snapshot_id} created={i.created_at:%H:%M:%S}")
                except berth.BerthError as e:
                    why.append(f"{sid}: {e}")
    finally:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
            try:
                s.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait()
        for pid in set(leaked) | set(_sandbox_pids(s.data_dir)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(s.data_dir, ignore_errors=True)
    if leaked:
        # A server-side bug, not the SDK's (reported with issue 14): a terminated fork branch's runsc
        # process sometimes stays. They are killed above so no test run leaves sandboxes behind.
        warnings.warn("sandboxes outlived their terminated sessions (killed): " + "; ".join(why or [c[:200] for c in leaked.values()]))


def _quiet(f: object) -> None:
    try:
        f()  # type: ignore[operator]
    except berth.BerthError:
        pass


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = _start_server()
    try:
        yield s
    finally:
        _stop_server(s)


@pytest.fixture()
def client(server: Server) -> Iterator[berth.Berth]:
    with berth.Berth(server.url, server.root_key) as b:
        yield b


@pytest.fixture()
def session(client: berth.Berth) -> Iterator[berth.Session]:
    with client.sessions.create(memory_mb=256, objective="pytest") as s:
        yield s


@pytest_asyncio.fixture()
async def aclient(server: Server) -> berth.AsyncBerth:  # type: ignore[misc]
    async with berth.AsyncBerth(server.url, server.root_key) as b:
        yield b


def wait_until(pred, timeout: float = 10.0, every: float = 0.1) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(every)
    return bool(pred())
