import pytest
from retarget.ir.dtypes import f32
from retarget.kernel import ir as k
from retarget_llvm_cpu import codegen, targets
from retarget_llvm_cpu.compile import compile_kernels


def kernel(scale=2.0):
    i = k.Var("i")
    return k.Kernel("scale", [k.Param("x", f32, 64, "read"), k.Param("y", f32, 64, "write")],
                    [k.Loop("i", 64, [k.Store("y", i, k.Binary("mul", k.Load("x", i, f32), k.const(scale, f32)))],
                            kind="vector")])


def llvm_must_not_run(*args, **kwargs):
    raise AssertionError("LLVM was invoked for a kernel already in the cache")


def test_recompiling_unchanged_kernels_returns_the_cached_bytes_without_llvm(monkeypatch, cache_dir):
    first = compile_kernels([kernel()], targets.parse("x86-64-v3"))
    assert list(cache_dir.rglob("*.o"))
    monkeypatch.setattr(codegen, "emit_object", llvm_must_not_run)
    second = compile_kernels([kernel()], targets.parse("x86-64-v3"))
    assert second.data == first.data


@pytest.mark.parametrize("change", ["kernel", "cpu"])
def test_a_changed_kernel_or_cpu_misses_the_cache(monkeypatch, change):
    compile_kernels([kernel()], targets.parse("x86-64-v3"))
    monkeypatch.setattr(codegen, "emit_object", llvm_must_not_run)
    with pytest.raises(AssertionError, match="already in the cache"):
        if change == "kernel":
            compile_kernels([kernel(3.0)], targets.parse("x86-64-v3"))
        else:
            compile_kernels([kernel()], targets.parse("x86-64-v4"))
