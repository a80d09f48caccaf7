"""The README's two commands are what CI and a new user run: keep them true."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands():
    block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_starts_with_two_commands():
    assert len(_commands()) == 2


def test_ci_runs_the_readme_test_command_verbatim():
    assert _commands()[1] in (ROOT / ".ci" / "run").read_text()


def test_readme_demo_matches_numpy(tmp_path):
    """The demo's compile and run steps, through the CLI, give the numpy answer to 1e-5."""
    demo = _commands()[0]
    steps = [s.strip() for s in demo.split("&&") if "retarget " in s]
    assert [s.split()[1] for s in steps] == ["compile", "run"]
    out = tmp_path / "y.npy"
    for step in steps:
        args = step.split()[1:]
        args = [str(tmp_path / "mlp.rtm") if a == "mlp.rtm" else a for a in args]
        if args[0] == "run":
            args += ["--output", str(out)]
        result = subprocess.run([sys.executable, "-m", "retarget", *args], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    w = np.load(ROOT / "examples" / "mlp_weights.npz")
    x = np.load(ROOT / "examples" / "x.npy")
    expected = np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-6)
