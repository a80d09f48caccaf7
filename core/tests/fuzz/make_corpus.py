"""Rebuild the fuzz corpus in corpus/ from the repository's own files and the zoo.

    python core/tests/fuzz/make_corpus.py

- mlir/: examples/*.mlir, the JAX StableHLO fixtures, the MLIR snippets of the importer tests,
  and a few graph-IR modules as retarget prints them;
- onnx/: zoo models exported with `zoo.export_onnx` (seeded weights, small sizes);
- rtm/: vmvx modules compiled from some of the above, and one split across two placements;
- input/: `--input` values (inputs.txt, one a line) and small .npy files.

Every file is small (the largest is about 100 KB); no weights but the zoo's seeded ones.
"""

from __future__ import annotations

import ast
import hashlib
import shutil
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REPO = HERE.parents[2]
MAX_SNIPPETS = 120

INPUTS = """\
2x2xf32=1 2 3 4
1x224x224x3xf32=0
f32=1.5
2xi1=1 0
4xi8=-1 2 -3 4
2x3xbf16=[1 2 3][4 5 6]
3xf16=1,2,3
0x4xf32=
2x8xf32=0.5
3xi64=9223372036854775807 -9223372036854775808 0
2xui8=255 0
2xf64=1e300 -1e-300
1x16xf32=1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
i32=-7
@x.npy
@x_f16.npy
@scalar.npy
"""


def _snippets() -> list[str]:
    texts = []
    for test in sorted((REPO / "core" / "tests" / "importers").glob("test_mlir_*.py")):
        for node in ast.walk(ast.parse(test.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "func.func" in node.value:
                texts.append(node.value)
    return list(dict.fromkeys(texts))[:MAX_SNIPPETS]


def _mlir(out: Path) -> list[Path]:
    from retarget.ir import print_module
    from retarget.testing import graphs

    out.mkdir(parents=True)
    for p in [*sorted((REPO / "examples").glob("*.mlir")),
              *sorted((REPO / "core" / "tests" / "importers" / "mlir").glob("*.mlir"))]:
        shutil.copy(p, out / p.name)
    for text in _snippets():
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        (out / f"snippet-{digest}.mlir").write_text(text)
    for name, make in graphs.REFERENCE_GRAPHS.items():
        (out / f"graph-{name}.mlir").write_text(print_module(make()[0]))
    return sorted(out.iterdir())


def _onnx(out: Path) -> None:
    from retarget.testing import zoo

    out.mkdir(parents=True)
    zoo.export_onnx("mlp", out / "zoo-mlp.onnx")
    zoo.export_onnx("small_cnn", out / "zoo-small_cnn.onnx")
    zoo.export_onnx("transformer_block", out / "zoo-transformer_block-small.onnx",
                    d_model=16, heads=2, seq=4, batch=1)


def _rtm(out: Path) -> None:
    import retarget
    from retarget.ir.core import Module
    from retarget.testing import graphs

    out.mkdir(parents=True)
    for name in ("mlp.mlir", "jax_mlp.stablehlo.mlir", "jax_cnn.stablehlo.mlir"):
        src = CORPUS / "mlir" / name
        retarget.compile(src, "vmvx").save(out / (Path(name).stem.split(".")[0] + ".rtm"))
    retarget.compile(CORPUS / "onnx" / "zoo-small_cnn.onnx", "vmvx").save(out / "zoo-small_cnn.rtm")
    add, chain = graphs.add_module(n=10)[0], graphs.chain_module()[0]
    two = Module({"add": add.functions["main"], "chain": chain.functions["main"]})
    two.functions["add"].name, two.functions["chain"].name = "add", "chain"
    retarget.compile(two, "vmvx").save(out / "two-functions.rtm")
    _split_rtm(out)
    for tmp in out.glob("*.tmp"):
        tmp.unlink()


def _split_rtm(out: Path) -> None:
    """A module split across two placements (format 2): the MLP graph with its max on the fallback."""
    import retarget
    from retarget.testing import graphs

    retarget.compile(graphs.mlp_module()[0], "vmvx", fallback="vmvx", refuse=["rt.max"]).save(out / "split.rtm")


def _input(out: Path) -> None:
    out.mkdir(parents=True)
    (out / "inputs.txt").write_text(INPUTS)
    np.save(out / "x.npy", np.arange(16, dtype=np.float32).reshape(2, 8) / 8)
    np.save(out / "x_f16.npy", np.ones((3, 2), np.float16))
    np.save(out / "x_fortran.npy", np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)))
    np.save(out / "scalar.npy", np.array(2.5, np.float64))
    np.save(out / "bools.npy", np.array([True, False, True]))
    np.savez(out / "pair.npz", a=np.zeros(2, np.float32), b=np.ones(3, np.int64))


def main() -> None:
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _mlir(CORPUS / "mlir")
        _onnx(CORPUS / "onnx")
        _rtm(CORPUS / "rtm")
        _input(CORPUS / "input")
    for folder in sorted(CORPUS.iterdir()):
        files = sorted(folder.iterdir())
        print(f"{folder.name}: {len(files)} files, {sum(f.stat().st_size for f in files):,} bytes")


if __name__ == "__main__":
    main()
