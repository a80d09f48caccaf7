"""The repository passes its own lint configuration (pyproject.toml's [tool.ruff]), so that a change that
breaks it fails the test command rather than waiting for someone to run ruff by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> str | None:
    beside = Path(sys.executable).parent / "ruff"  # requirements-dev.txt installs it into the venv
    return str(beside) if beside.exists() else shutil.which("ruff")


def test_ruff_check_passes_on_the_whole_repository():
    exe = ruff()
    if exe is None:
        pytest.skip("ruff is not installed (requirements-dev.txt pins it: pip install -r requirements-dev.txt)")
    run = subprocess.run([exe, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
