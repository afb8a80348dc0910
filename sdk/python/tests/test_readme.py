"""Runs every ```python block of sdk/python/README.md and of the repository README's Python SDK section, as
written, against the test server: the examples cannot rot. Each must also clean up after itself (no live
session or snapshot left)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import berth
from conftest import Server, readme_python_blocks

README_BLOCKS = readme_python_blocks()
BLOCKS = README_BLOCKS["sdk"]
LIVE = ["creating", "running", "paused", "hibernating", "hibernated", "waking"]


def _run(server: Server, code: str, tmp_path: Path) -> str:
    env = {**os.environ, "BERTH_URL": server.url, "BERTH_TOKEN": server.root_key}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"README block failed (exit {r.returncode}):\n{r.stderr}"
    return r.stdout


def _block(marker: str) -> str:
    found = [b for b in BLOCKS if marker in b]
    assert len(found) == 1, f"expected one README block containing {marker!r}"
    return found[0]


def test_the_readmes_have_their_examples() -> None:
    assert len(BLOCKS) == 4
    assert len(README_BLOCKS["main"]) == 1


@pytest.fixture()
def leaves_nothing(client: berth.Berth):  # type: ignore[no-untyped-def]
    before = {s.id for s in client.sessions.list(states=LIVE)}
    snaps = {s.snapshot_id for s in client.snapshots.list()}
    yield
    assert {s.id for s in client.sessions.list(states=LIVE)} == before
    assert {s.snapshot_id for s in client.snapshots.list() if s.kind == "named"} == snaps


def test_quick_start(server: Server, tmp_path: Path, leaves_nothing: None) -> None:
    out = _run(server, _block("quick start"), tmp_path).splitlines()
    assert out[0].startswith("3 hello from ")
    assert out[1:6] == [" warning", " False", "stdout tick 1", "stdout tick 2", "stdout tick 3"]
    assert out[-1] == "b'# hello' running"


def test_the_eval_example_forks_eight_branches_from_the_same_state(server: Server, client: berth.Berth, tmp_path: Path, leaves_nothing: None) -> None:
    out = [json.loads(line) for line in _run(server, _block("step-37"), tmp_path).splitlines()]
    assert len(out) == 8 and len({r["branch"] for r in out}) == 8
    stdout = [r["stdout"] for r in out]
    assert stdout[:4] == ["3", "42", "6", "77"]
    assert stdout[4:7] == ["deleted", "5", "2"]
    # Only the branch that deleted the file lost it; the others started from the same full state.
    assert [r["data_left"] for r in out] == [True, True, True, True, False, True, True, True]
    assert out[7]["timed_out"] is True and all(not r["timed_out"] for r in out[:7])
    for r in out:  # every branch is gone
        assert client.sessions.get(r["branch"]).state == "terminated"


def test_the_async_example(server: Server, tmp_path: Path, leaves_nothing: None) -> None:
    assert _run(server, _block("asyncio.gather"), tmp_path).strip() == "['0', '1', '2', '3']"


def test_the_take_over_example(server: Server, tmp_path: Path, leaves_nothing: None) -> None:
    out = _run(server, _block("Take control"), tmp_path).splitlines()
    assert out[3].startswith(f"{server.url}/#watch=bwl_")
    assert out[:3] + out[4:] == [
        "True root:root",
        "human_control True",
        "allow",
        "[('reviewer', 'active')]",
        "<h1>fixed by hand</h1>",
        "404",
    ]


def test_the_python_section_of_the_repository_readme(server: Server, tmp_path: Path, leaves_nothing: None) -> None:
    [block] = README_BLOCKS["main"]
    out = _run(server, block, tmp_path).splitlines()
    assert out[0] == "root:root"
    assert out[1].startswith(f"{server.url}/#signin=")
    watch_url, states = out[2].split(" ", 1)
    assert watch_url.startswith(f"{server.url}/#watch=bwl_") and states == "['active']"
    port_url, states = out[3].split(" ", 1)
    assert port_url.startswith(f"{server.url}/p/") and port_url.endswith("/") and states == "['active']"
    assert len(out) == 4
