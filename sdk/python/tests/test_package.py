"""The package as users get it: installed (not imported from the source tree), typed (py.typed, mypy
--strict clean), and the README examples (the SDK's and the repository README's Python section) type-check
against it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import berth
from conftest import readme_python_blocks

SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_tests_run_against_the_installed_package() -> None:
    # test/python/pytest.test.ts installs into a venv and sets this; by hand, PYTHONPATH=src runs them too.
    if os.environ.get("BERTH_SDK_EXPECT_INSTALLED") == "1":
        where = Path(berth.__file__).resolve()
        assert SRC not in where.parents, f"berth was imported from the source tree: {where}"
        assert "site-packages" in where.parts
    assert (Path(berth.__file__).parent / "py.typed").is_file()
    assert berth.__version__


def test_mypy_strict_on_the_package_and_the_readme_examples(tmp_path: Path) -> None:
    found = readme_python_blocks()
    blocks = found["sdk"] + found["main"]
    assert len(blocks) >= 5
    pkg = tmp_path / "readme_examples"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for i, code in enumerate(blocks):
        (pkg / f"example_{i}.py").write_text(code)
    cfg = tmp_path / "mypy.ini"
    # The package must pass --strict; the examples are checked (every call against the SDK's signatures)
    # without demanding annotations on their own helper functions.
    cfg.write_text(
        "[mypy]\nstrict = True\n"
        "[mypy-readme_examples.*]\ndisallow_untyped_defs = False\ndisallow_untyped_calls = False\ndisallow_incomplete_defs = False\nwarn_return_any = False\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(cfg), "--cache-dir", str(tmp_path / "cache"), "-p", "berth", "-p", "readme_examples"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
