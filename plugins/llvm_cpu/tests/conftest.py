import numpy as np
import pytest
from retarget_llvm_cpu import targets
from retarget_llvm_cpu.compile import compile_kernels
from retarget_llvm_cpu.loader import LlvmCpuLoader


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own empty kernel cache."""
    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def run_kernel():
    return _run_kernel


def _run_kernel(kernel, arrays, target="host"):
    """Compile `kernel` for `target`, load it and run every workgroup on `arrays` (params in order)."""
    binary = compile_kernels([kernel], targets.parse(target))
    bind = LlvmCpuLoader().load(binary)[0]
    run = bind([np.ascontiguousarray(a).reshape(-1) for a in arrays])
    gx, gy, gz = kernel.workgroup_count
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                run((x, y, z))
    return arrays
