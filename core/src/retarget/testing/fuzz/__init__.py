"""A seeded mutation fuzzer for everything retarget reads from outside: MLIR files, ONNX
models, `.rtm` modules and `--input` values.

Each input is a seed from the corpus (`core/tests/fuzz/corpus/<target>/`) with one to a
few mutations. It must come out with a result or with a `RetargetError`; any other
exception, an input that runs past `time_limit`, or one that runs out of memory (the
address space is capped at the current size plus `memory_limit` while fuzzing) is a
finding. Input `i` of a run with `seed` is always the same, so a finding reproduces:

    python -m retarget.testing.fuzz --target mlir --seconds 3600       # a long run
    python -m retarget.testing.fuzz --target mlir --replay fuzz-findings/mlir-....mlir
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import signal
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import RetargetError
from .targets import TARGETS, Target

__all__ = ["TARGETS", "Finding", "Report", "default_corpus", "fuzz", "make_input", "run_one"]


def default_corpus() -> Path:
    """The corpus in a source checkout: core/tests/fuzz/corpus."""
    return Path(__file__).resolve().parents[4] / "tests" / "fuzz" / "corpus"


@dataclass
class Finding:
    target: str
    index: int  # the input's number in its run (-1: a replayed file)
    kind: str  # "exception", "timeout" or "memory"
    error: str  # "Type: message", first line
    where: str  # file:line of the innermost frame in retarget, to tell findings apart
    traceback: str
    data: bytes = field(repr=False)

    @property
    def signature(self) -> str:
        return f"{self.kind} {self.error.split(':')[0]} at {self.where}"


@dataclass
class Report:
    target: str
    seed: int
    inputs: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)  # "ok" or the RetargetError class name -> count
    findings: list[Finding] = field(default_factory=list)  # one per signature, the first input that showed it

    def summary(self) -> str:
        lines = [f"{self.target}: {self.inputs} inputs in {self.seconds:.1f} s (seed {self.seed}); "
                 + ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())]
        for f in self.findings:
            lines.append(f"  FINDING #{f.index}: {f.signature}\n    {f.error}")
        return "\n".join(lines)


class _InputTimeout(BaseException):
    """Raised in the fuzzed code by the per-input alarm; a BaseException, so `except Exception` lets it pass."""


def make_input(target: Target, seeds: list[bytes], seed: int, index: int) -> bytes:
    """Input `index` of a run with `seed`: always the same bytes for the same corpus."""
    rng = random.Random(f"{target.name}:{seed}:{index}")
    return target.mutate(rng, rng.choice(seeds), seeds)


def run_one(target: Target, data: bytes, workdir: Path, time_limit: float, index: int = -1) -> Finding | str:
    """Run one input: the outcome's name ("ok" or the RetargetError's class), or a Finding."""
    try:
        with _alarm(time_limit), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow and precision warnings are expected of garbage
            target.run(data, workdir)
        return "ok"
    except RetargetError as e:
        return next(c.__name__ for c in type(e).__mro__ if not c.__name__.startswith("_"))
    except _InputTimeout as e:
        return _finding(target, index, "timeout", e, data, f"no result after {time_limit} s")
    except MemoryError as e:
        return _finding(target, index, "memory", e, data)
    except Exception as e:
        return _finding(target, index, "exception", e, data)


def fuzz(target: str, *, seconds: float | None = 10.0, count: int | None = None, seed: int = 0,
         corpus: Path | None = None, time_limit: float = 10.0, memory_limit: int = 2 << 30,
         findings_dir: Path | None = None, progress=None) -> Report:
    """Run `target` on mutated corpus inputs until `seconds` pass or `count` inputs ran."""
    t = TARGETS[target]
    corpus = corpus or default_corpus()
    seeds = t.seeds(corpus)
    if not seeds:
        raise RetargetError(f"no seed inputs for the '{target}' fuzz target in {corpus}",
                            hint="pass --corpus, or run core/tests/fuzz/make_corpus.py")
    report = Report(target, seed)
    seen: set[str] = set()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"retarget-fuzz-{target}-", dir=_scratch_root()) as tmp, \
            _memory_cap(memory_limit):
        workdir = Path(tmp)
        t.prepare(corpus, workdir)
        index = 0
        while (count is None or index < count) and (seconds is None or time.perf_counter() - start < seconds):
            data = make_input(t, seeds, seed, index)
            if findings_dir is not None:  # what was running, should the process itself die
                findings_dir.mkdir(parents=True, exist_ok=True)
                (findings_dir / f"{target}-in-flight{t.suffix}").write_bytes(data)
            outcome = run_one(t, data, workdir, time_limit, index)
            if isinstance(outcome, Finding):
                report.outcomes["FINDING"] += 1
                if outcome.signature not in seen:
                    seen.add(outcome.signature)
                    report.findings.append(outcome)
                    if findings_dir is not None:
                        _save(outcome, findings_dir, t)
            else:
                report.outcomes[outcome] += 1
            index += 1
            if progress and index % 500 == 0:
                progress(f"{target}: {index} inputs, {len(report.findings)} findings")
    report.inputs, report.seconds = index, time.perf_counter() - start
    if findings_dir is not None:
        (findings_dir / f"{target}-in-flight{t.suffix}").unlink(missing_ok=True)
    return report


def replay(target: str, path: Path, time_limit: float = 10.0) -> Finding | str:
    t = TARGETS[target]
    with tempfile.TemporaryDirectory(prefix=f"retarget-fuzz-{target}-") as tmp:
        t.prepare(default_corpus(), Path(tmp))
        return run_one(t, Path(path).read_bytes(), Path(tmp), time_limit)


def _scratch_root() -> str | None:
    """Memory-backed /dev/shm where there is one: each input is written to a file, and disks are slow at that."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _finding(target: Target, index: int, kind: str, e: BaseException, data: bytes,
             message: str | None = None) -> Finding:
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "/retarget/" in f.filename and "/testing/fuzz/" not in f.filename]
    inner = (ours or frames or [None])[-1]
    where = f"{inner.filename.rsplit('/retarget/', 1)[-1]}:{inner.lineno}" if inner else "?"
    text = message or (str(e).strip().splitlines() or [""])[0][:300]
    return Finding(target.name, index, kind, f"{type(e).__name__}: {text}", where,
                   "".join(traceback.format_exception(e)), data)


def _save(f: Finding, folder: Path, t: Target) -> None:
    name = f"{f.target}-{hashlib.sha256(f.signature.encode()).hexdigest()[:10]}"
    (folder / (name + t.suffix)).write_bytes(f.data)
    (folder / (name + ".txt")).write_text(f"{f.signature}\ninput #{f.index}\n\n{f.traceback}")


@contextlib.contextmanager
def _alarm(seconds: float):
    """Raise _InputTimeout in this thread after `seconds` (main thread only, where signals arrive)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise _InputTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _memory_cap(headroom: int):
    """Cap the address space at its current size plus `headroom`, so that a runaway allocation
    raises MemoryError (a finding) instead of waking the OOM killer. Linux only."""
    try:
        import resource

        size = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize:"))) * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + headroom
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, StopIteration, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
