"""The fuzz targets: what each one reads, how its inputs are mutated, and how one input is run.

A target's `run(data, workdir)` feeds one input to the code under test as a user would
(a file on disk, or the `--input` text) and returns normally, or raises. The runner
counts a `RetargetError` as a clean rejection and anything else as a finding. `run`
also checks the result's type, since garbage accepted silently is a bug too.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import mutate as M


@dataclass
class Target:
    name: str
    suffix: str  # of the files saved for a finding
    seeds: Callable[[Path], list[bytes]]  # corpus folder -> seed inputs
    mutate: Callable[[random.Random, bytes, list[bytes]], bytes]  # (rng, one seed, all seeds) -> input
    run: Callable[[bytes, Path], None]  # (input, scratch folder)
    prepare: Callable[[Path, Path], None] = lambda corpus, workdir: None  # fills the scratch folder once


def _files(folder: Path, *suffixes: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in suffixes] if folder.is_dir() else []


# -- MLIR: the parser and every dialect importer, from a file ------------------------------------------


def _mlir_seeds(corpus: Path) -> list[bytes]:
    return _files(corpus / "mlir", ".mlir")


def _mlir_mutate(rng: random.Random, seed: bytes, seeds: list[bytes]) -> bytes:
    if rng.random() < 0.03:
        return M.mutate_bytes(rng, seed)  # invalid UTF-8, NUL bytes
    text = seed.decode()
    others = [s.decode() for s in rng.sample(seeds, min(3, len(seeds)))]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        text = M.mutate_text(rng, text, words=_mlir_words(), others=others)
    return text.encode("utf-8", "surrogatepass")


def _mlir_words() -> list[str]:
    from ...mlir.syntax import CUSTOM_SYNTAX

    return M.MLIR_WORDS + sorted(CUSTOM_SYNTAX)


def _mlir_run(data: bytes, workdir: Path) -> None:
    from ...importers.mlir import MlirImporter
    from ...ir.core import Module

    path = workdir / "fuzz.mlir"
    path.write_bytes(data)
    module = MlirImporter().load(path)
    assert isinstance(module, Module), f"the importer returned a {type(module).__name__}"


# -- ONNX: protobuf, shape inference and the importer ---------------------------------------------------


def _onnx_seeds(corpus: Path) -> list[bytes]:
    return _files(corpus / "onnx", ".onnx")


def _onnx_mutate(rng: random.Random, seed: bytes, seeds: list[bytes]) -> bytes:
    from ...importers.onnx import SUPPORTED_OPS

    return M.mutate_onnx(rng, seed, op_types=SUPPORTED_OPS)


def _onnx_run(data: bytes, workdir: Path) -> None:
    from ...importers.onnx import OnnxImporter
    from ...ir import verify

    path = workdir / "fuzz.onnx"
    path.write_bytes(data)
    verify(OnnxImporter().load(path))


# -- .rtm: the module reader, the executable loader, and one call of each function ----------------------

MAX_CALL_BYTES = 1 << 20  # functions with larger inputs are loaded, not called


def _rtm_seeds(corpus: Path) -> list[bytes]:
    return _files(corpus / "rtm", ".rtm")


def _rtm_mutate(rng: random.Random, seed: bytes, seeds: list[bytes]) -> bytes:
    data = seed
    for _ in range(rng.choice([1, 1, 2])):
        data = M.mutate_module(rng, data, executable_words=_mlir_words())
    return data


def _rtm_prepare(corpus: Path, workdir: Path) -> None:
    from ...importers import mlir  # noqa: F401  (registers the dialects' syntax, as a compiling process has)


def _rtm_run(data: bytes, workdir: Path) -> None:
    from ...runtime import load

    path = workdir / "fuzz.rtm"
    path.write_bytes(data)
    module = load(path, device="local-sync")
    for fn in module.functions.values():
        if sum(t.nbytes for t in fn.input_types) > MAX_CALL_BYTES:
            continue
        results = fn(*[np.zeros(t.shape, t.dtype.np_dtype) for t in fn.input_types])
        results = results if isinstance(results, tuple) else (results,)
        for r, t in zip(results, fn.output_types):
            assert r.shape == t.shape and r.dtype == t.dtype.np_dtype, f"{fn.name} gave {r.shape} {r.dtype}, not {t}"


# -- --input: IREE's value syntax, and .npy files -------------------------------------------------------

NPY_PREFIX = b"NPY:"  # an input that is the bytes of a .npy file, read through `@file`
INPUT_WORDS = ["x", "=", "@", " ", ",", "[", "]", "-", "+", ".", "e", "f32", "f16", "bf16", "f64", "i1", "i4", "i8",
               "i16", "i32", "i64", "ui8", "si8", "index", "nan", "inf", "-inf", "0x10", "1e999", "_", "?", "*", "0",
               "4294967296", "-1", "99999999999999999999", "1.5", "True", "\x00", "\n", "x.npy", "x.npz"]


def _input_seeds(corpus: Path) -> list[bytes]:
    folder = corpus / "input"
    lines = (folder / "inputs.txt").read_text().splitlines() if (folder / "inputs.txt").is_file() else []
    return [line.encode() for line in lines if line.strip()] + [NPY_PREFIX + d for d in _files(folder, ".npy", ".npz")]


def _input_mutate(rng: random.Random, seed: bytes, seeds: list[bytes]) -> bytes:
    if seed.startswith(NPY_PREFIX):
        data = seed[len(NPY_PREFIX):]
        for _ in range(rng.choice([1, 1, 2, 3])):
            if rng.random() < 0.6 and len(data) > 10:  # the header: magic, version, dict
                head, tail = data[:128], data[128:]
                data = (M.mutate_bytes(rng, head) if rng.random() < 0.5 else _mutate_npy_header(rng, head)) + tail
            else:
                data = M.mutate_bytes(rng, data)
        return NPY_PREFIX + data
    text = seed.decode()
    for _ in range(rng.choice([1, 1, 2, 3])):
        text = M.mutate_text(rng, text, words=INPUT_WORDS)
    return text.encode("utf-8", "surrogatepass")


def _mutate_npy_header(rng: random.Random, head: bytes) -> bytes:
    text = head.decode("latin-1")
    for old, new in (("'shape': (", rng.choice(["'shape': (4294967296, ", "'shape': (-1, ", "'shape': (0, ",
                                                  "'shape': (99999999999, 99999999999, "])),
                     ("'descr': '", rng.choice(["'descr': '|O", "'descr': '>", "'descr': '|V", "'descr': '<U"])),
                     ("'fortran_order': False", "'fortran_order': True"),
                     ("{", rng.choice(["{'a': __import__('os'), ", "{{", "[", ""]))):
        if old in text and rng.random() < 0.5:
            text = text.replace(old, new, 1)
    return text.encode("latin-1", "replace")


def _input_prepare(corpus: Path, workdir: Path) -> None:
    (workdir / "files").mkdir(exist_ok=True)
    for p in sorted((corpus / "input").glob("*.np[yz]")):
        (workdir / "files" / p.name).write_bytes(p.read_bytes())


def _input_run(data: bytes, workdir: Path) -> None:
    from ...runtime import parse_input

    if data.startswith(NPY_PREFIX):
        path = workdir / "x.npy"
        path.write_bytes(data[len(NPY_PREFIX):])
        text = f"@{path}"
    else:
        text = data.decode("utf-8", "surrogatepass")
        if text.startswith("@"):  # keep file reads inside the scratch folder's copy of the corpus
            text = "@" + os.path.join(workdir, "files", text[1:].lstrip("/"))
    value = parse_input(text)
    assert type(value) is np.ndarray, f"parse_input returned a {type(value).__name__}"


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("mlir", ".mlir", _mlir_seeds, _mlir_mutate, _mlir_run),
        Target("onnx", ".onnx", _onnx_seeds, _onnx_mutate, _onnx_run),
        Target("rtm", ".rtm", _rtm_seeds, _rtm_mutate, _rtm_run, _rtm_prepare),
        Target("input", ".txt", _input_seeds, _input_mutate, _input_run, _input_prepare),
    )
}
