"""The short fuzz run of CI, and the fuzzer's own behaviour.

Each target gets the same inputs on every run (input i of seed 0), up to a count or a time
budget, whichever comes first; the long run is `python -m retarget.testing.fuzz --seconds 3600`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from retarget.errors import ParseError
from retarget.testing.fuzz import TARGETS, Finding, default_corpus, fuzz, make_input, run_one
from retarget.testing.fuzz.targets import Target

SHORT_RUN = {"count": 3000, "seconds": 12.0}  # per target: at most 48 s for all four


@pytest.mark.parametrize("target", list(TARGETS))
def test_short_fuzz_run_finds_nothing(target):
    if target == "onnx":
        pytest.importorskip("onnx")
    report = fuzz(target, **SHORT_RUN)
    assert not report.findings, report.summary() + "\n\n" + "\n\n".join(f.traceback for f in report.findings)
    assert report.inputs >= 200, f"only {report.inputs} inputs ran: {report.summary()}"
    assert report.outcomes["ok"] > 0, f"no input got through: the corpus or the mutator is broken\n{report.summary()}"
    assert sum(report.outcomes.values()) - report.outcomes["ok"] > 0, "no input was rejected: nothing was mutated"


def test_corpus_has_seeds_for_every_target():
    for name, target in TARGETS.items():
        assert target.seeds(default_corpus()), f"no seeds for {name} in {default_corpus()}"


def test_input_i_is_the_same_on_every_run():
    t = TARGETS["mlir"]
    seeds = t.seeds(default_corpus())
    assert make_input(t, seeds, 0, 17) == make_input(t, seeds, 0, 17)
    assert make_input(t, seeds, 0, 17) != make_input(t, seeds, 1, 17)


def _target(run) -> Target:
    return Target("fake", ".txt", lambda corpus: [b"x"], lambda rng, seed, seeds: seed, run)


def _raise(error):
    def run(data, workdir):
        raise error

    return run


def test_our_errors_are_clean_rejections(tmp_path):
    assert run_one(_target(_raise(ParseError("bad"))), b"x", tmp_path, 5.0) == "ParseError"


def test_any_other_exception_is_a_finding_with_its_traceback(tmp_path):
    outcome = run_one(_target(_raise(KeyError("k"))), b"x", tmp_path, 5.0)
    assert isinstance(outcome, Finding) and outcome.kind == "exception"
    assert outcome.error == "KeyError: 'k'" and "KeyError" in outcome.traceback


def test_a_hang_is_a_finding(tmp_path):
    def spin(data, workdir):
        while True:
            pass

    outcome = run_one(_target(spin), b"x", tmp_path, 0.2)
    assert isinstance(outcome, Finding) and outcome.kind == "timeout"


def test_running_out_of_memory_is_a_finding(tmp_path):
    outcome = run_one(_target(_raise(MemoryError())), b"x", tmp_path, 5.0)
    assert isinstance(outcome, Finding) and outcome.kind == "memory"


def test_the_long_run_is_one_command_that_saves_findings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "retarget.testing.fuzz", "--target", "input", "--count", "50",
                          "--findings", str(tmp_path / "found")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "input: 50 inputs" in out.stdout
    assert not (tmp_path / "found" / "input-in-flight.txt").exists()


def test_a_saved_finding_replays(tmp_path):
    saved = tmp_path / "f.mlir"
    saved.write_text('func.func @f() { "x.y"() : () -> () }')  # rejected cleanly
    out = subprocess.run([sys.executable, "-m", "retarget.testing.fuzz", "--target", "mlir", "--replay", str(saved)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("clean: "), out.stdout + out.stderr


def test_resealed_modules_have_correct_checksums():
    """Most .rtm mutations keep the checksums right, so that the manifest's checks are what is tested."""
    import hashlib
    import io
    import random
    import zipfile

    from retarget.testing.fuzz.mutate import mutate_module

    seed = (default_corpus() / "rtm" / "mlp.rtm").read_bytes()
    sealed = 0
    for i in range(40):
        data = mutate_module(random.Random(i), seed)
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                meta = json.loads(zf.read("manifest.json"))["entries"]
                sealed += all(hashlib.sha256(zf.read(n)).hexdigest() == m["sha256"] for n, m in meta.items())
        except Exception:
            continue
    assert sealed >= 10
