"""The peers that retarget is measured against, each only when it is installed:

- `torch`: PyTorch eager, on the CPU and on a CUDA GPU (tensors already on the GPU);
- `torch-compile`: torch.compile (inductor), slow to compile; on the CPU it needs a C++ compiler,
  on a GPU it needs triton;
- `onnxruntime`: ONNX Runtime's CPU execution provider, and its CUDA one where present;
- `iree`: IREE (`iree-base-compiler`, `iree-base-runtime`) from the model's ONNX export: llvm-cpu on
  `local-task`, cuda on a CUDA GPU.

A peer that cannot run is skipped with the reason, never an error. Every peer gets the same model
and inputs as retarget; GPU peers run with TF32 off, since retarget computes in plain fp32.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .timing import Runner

PEERS = ("torch", "torch-compile", "onnxruntime", "iree")


@dataclass
class Workload:
    """One model and its inputs, as every runner gets them. `onnx()` exports it once, on demand."""

    name: str
    model: object  # a torch.nn.Module in eval mode
    inputs: tuple  # torch tensors
    work_dir: Path
    _onnx: Path | None = None

    @property
    def arrays(self) -> list[np.ndarray]:
        return [x.numpy() for x in self.inputs]

    def onnx(self) -> Path:
        if self._onnx is None:
            self._onnx = export_onnx(self.model, self.inputs, self.work_dir / f"{self.name}.onnx")
        return self._onnx


def export_onnx(model, inputs, path: Path, opset: int = 17, dynamic_axes: dict | None = None) -> Path:
    """The TorchScript exporter, as `retarget.testing.zoo.export_onnx` uses (no package beyond torch). Inputs are
    named input_0, input_1, ...; `dynamic_axes` ({"input_0": {0: "batch"}}) makes their dimensions symbols."""
    import warnings

    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), opset_version=opset, dynamo=False,
                          input_names=[f"input_{i}" for i in range(len(inputs))], output_names=["output"],
                          dynamic_axes=dynamic_axes)
    return path


@dataclass
class Peer:
    """A peer that can run here: `build(workload)` returns its Runner for one model."""

    name: str  # one of PEERS
    label: str
    place: str  # "cpu" or "gpu"
    device: str
    build: Callable[[Workload], Runner]
    facts: dict = field(default_factory=dict)


def _numpy(out):
    if isinstance(out, (tuple, list)):
        return [_numpy(o) for o in out]
    if hasattr(out, "to_host"):  # an IREE DeviceArray
        return np.asarray(out.to_host())
    if hasattr(out, "detach"):
        return out.detach().cpu().numpy()
    return np.asarray(out)


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cxx_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend would use: $CXX, else c++/g++/clang++ on PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def start_model() -> None:
    """Forget torch.compile's caches between models, so each model compiles fresh and specialised
    (their caches are per code object: a second model through nn.Sequential would recompile as dynamic)."""
    import sys

    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()


# -- torch ----------------------------------------------------------------------------------------


def _torch_cpu(compiled: bool) -> Callable[[Workload], Runner]:
    def build(work: Workload) -> Runner:
        import torch

        model = torch.compile(work.model) if compiled else work.model
        facts = {}
        if compiled:
            start = time.perf_counter()
            with torch.no_grad():
                model(*work.inputs)
            facts["compile_s"] = time.perf_counter() - start

        def call():
            with torch.no_grad():
                return _numpy(model(*work.inputs))

        return Runner("", call, facts=facts)

    return build


def _torch_gpu(compiled: bool) -> Callable[[Workload], Runner]:
    def build(work: Workload) -> Runner:
        import torch

        gpu_model = copy.deepcopy(work.model).to("cuda")  # .to() moves in place; the CPU runners keep theirs
        model = torch.compile(gpu_model) if compiled else gpu_model
        inputs = [x.to("cuda") for x in work.inputs]
        facts = {}
        if compiled:
            start = time.perf_counter()
            with torch.no_grad():
                model(*inputs)
            torch.cuda.synchronize()
            facts["compile_s"] = time.perf_counter() - start

        def call():
            with torch.no_grad():
                model(*inputs)
            torch.cuda.synchronize()

        def result():
            with torch.no_grad():
                return _numpy(model(*inputs))

        def device_time() -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.no_grad():
                start.record()
                model(*inputs)
                end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        return Runner("", call, result=result, device_time=device_time, facts=facts)

    return build


def capture_cuda_graph(model, inputs):
    """`model(*inputs)` (on the GPU) captured into a torch.cuda.CUDAGraph after a warm-up on a side stream, as
    torch.cuda.graphs asks: (the graph, its output tensor). Replaying it reads `inputs`' memory."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            model(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        output = model(*inputs)
    return graph, output


def _torch_cuda_graph(work: Workload) -> Runner:
    """torch eager captured once into a CUDA graph (torch.cuda.CUDAGraph) and replayed: the least
    host work torch can do per call, the fair peer for retarget's own CUDA graphs."""
    import torch

    model = copy.deepcopy(work.model).to("cuda")
    inputs = [x.to("cuda") for x in work.inputs]
    graph, output = capture_cuda_graph(model, inputs)
    captured = (model, inputs)  # the graph reads their memory: it must outlive the runner

    def call():
        graph.replay()
        torch.cuda.synchronize()
        return captured

    def result():
        call()
        return _numpy(output)

    def device_time() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return Runner("", call, result=result, device_time=device_time)


# -- ONNX Runtime -----------------------------------------------------------------------------------


def _onnxruntime(provider: str) -> Callable[[Workload], Runner]:
    def build(work: Workload) -> Runner:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # Its idle pool spins by default, which steals the core from whichever runner comes next.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(work.onnx()), options, providers=[provider])
        if session.get_providers()[0] != provider:
            raise RuntimeError(f"ONNX Runtime fell back to {session.get_providers()[0]}")
        feeds = {i.name: a for i, a in zip(session.get_inputs(), work.arrays)}
        return Runner("", lambda: session.run(None, feeds)[0])

    return build


# -- IREE -------------------------------------------------------------------------------------------


def _iree(target_backend: str, driver: str, flags: list[str]) -> Callable[[Workload], Runner]:
    def build(work: Workload) -> Runner:
        import iree.compiler as ireec
        import iree.runtime as ireert
        from iree.compiler.tools.import_onnx.__main__ import main as import_onnx
        from iree.compiler.tools.import_onnx.__main__ import parse_arguments

        start = time.perf_counter()
        mlir = work.work_dir / f"{work.name}.iree.mlir"
        import_onnx(parse_arguments([str(work.onnx()), "-o", str(mlir)]))
        vmfb = ireec.compile_file(str(mlir), target_backends=[target_backend], extra_args=flags)
        compile_s = time.perf_counter() - start
        module = ireert.load_vm_flatbuffer(vmfb, driver=driver)
        fn = module.main_graph  # the ONNX importer names the function after the graph
        arrays = work.arrays
        return Runner("", lambda: _numpy(fn(*arrays)), facts={"compile_s": compile_s})

    return build


# -- which peers run here ---------------------------------------------------------------------------


def plan(selected: set[str], places: set[str], gpu_arch: str | None = None) -> tuple[list[Peer], list[dict]]:
    """The peers among `selected` that can run on `places` ("cpu", "gpu") here, and, for each one
    that cannot, `{"runner": label, "reason": why}`. `gpu_arch` (e.g. "sm_90") is the CUDA GPU's."""
    peers: list[Peer] = []
    skipped: list[dict] = []

    def skip(label: str, reason: str) -> None:
        skipped.append({"runner": label, "reason": reason})

    torch_ok = _available("torch")
    torch_cuda = False
    if torch_ok and "gpu" in places:
        import torch

        torch_cuda = torch.cuda.is_available()
        if torch_cuda:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False

    for compiled in (False, True):
        name = "torch-compile" if compiled else "torch"
        if name not in selected:
            continue
        what = "torch.compile" if compiled else "torch eager"
        for place in sorted(places):
            label = f"{what} {place}"
            if not torch_ok:
                skip(label, "torch is not installed (pip install torch)")
            elif place == "cpu":
                if compiled and cxx_compiler() is None:
                    skip(label, "torch.compile on the CPU needs a C++ compiler (set CXX, or install g++)")
                else:
                    peers.append(Peer(name, label, "cpu", "cpu", _torch_cpu(compiled),
                                      {"slow_to_compile": True} if compiled else {}))
            elif not torch_cuda:
                skip(label, "this torch has no CUDA device (torch.cuda.is_available() is False)")
            elif compiled and not _available("triton"):
                skip(label, "torch.compile on a GPU needs triton, which is not installed")
            else:
                peers.append(Peer(name, label, "gpu", "cuda:0", _torch_gpu(compiled),
                                  {"slow_to_compile": True} if compiled else {}))
                if not compiled:
                    peers.append(Peer(name, "torch cuda graph gpu", "gpu", "cuda:0", _torch_cuda_graph))

    if "onnxruntime" in selected:
        for place, provider in (("cpu", "CPUExecutionProvider"), ("gpu", "CUDAExecutionProvider")):
            if place not in places:
                continue
            label = f"onnxruntime {place}"
            if not _available("onnxruntime"):
                skip(label, "onnxruntime is not installed (pip install onnxruntime)")
                continue
            import onnxruntime as ort

            providers = ort.get_available_providers()
            if provider not in providers:
                skip(label, f"this onnxruntime has no {provider}, only {', '.join(providers)}"
                     + (" (pip install onnxruntime-gpu)" if place == "gpu" else ""))
            elif not torch_ok:
                skip(label, "the model's ONNX export needs torch, which is not installed")
            else:
                peers.append(Peer("onnxruntime", label, place, place if place == "cpu" else "cuda:0",
                                  _onnxruntime(provider)))

    if "iree" in selected:
        missing = [m for m, dist in (("iree.compiler", "iree-base-compiler"), ("iree.runtime", "iree-base-runtime"))
                   if not _available(m)]
        for place in sorted(places):
            label = "iree llvm-cpu local-task" if place == "cpu" else "iree cuda"
            if missing:
                skip(label, "IREE is not installed (pip install iree-base-compiler iree-base-runtime)")
            elif not torch_ok or not _available("onnx"):
                skip(label, "IREE is fed the model's ONNX export, which needs torch and onnx")
            elif place == "cpu":
                peers.append(Peer("iree", label, "cpu", "local-task",
                                  _iree("llvm-cpu", "local-task", ["--iree-llvmcpu-target-cpu=host"])))
            else:
                import iree.runtime as ireert

                if "cuda" not in ireert.query_available_drivers():
                    skip(label, "this IREE runtime has no cuda driver")
                elif not gpu_arch:
                    skip(label, "no CUDA GPU among the devices benchmarked, so no architecture to compile for")
                else:
                    peers.append(Peer("iree", label, "gpu", "cuda:0",
                                      _iree("cuda", "cuda", [f"--iree-cuda-target={gpu_arch}"])))
    return peers, skipped


def runner(peer: Peer, work: Workload) -> Runner:
    """The peer's Runner for `work`, labelled and with its facts."""
    r = peer.build(work)
    r.label = peer.label
    r.facts = {"kind": "peer", "peer": peer.name, "device": peer.device, "place": peer.place, **peer.facts, **r.facts}
    return r
