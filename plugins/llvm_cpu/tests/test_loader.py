import llvmlite.binding as llvm
import numpy as np
import pytest
from retarget.errors import UnknownDeviceError
from retarget.ir.dtypes import f32
from retarget.kernel import ir as k
from retarget.local_drivers import LOCAL_TASK
from retarget_llvm_cpu import targets
from retarget_llvm_cpu.compile import compile_kernels
from retarget_llvm_cpu.loader import LlvmCpuLoader

IS_X86 = llvm.get_process_triple().startswith("x86_64")
ELF_MACHINE_AARCH64 = 183


def copy_kernel(n=64):
    i = k.Var("i")
    return k.Kernel("copy", [k.Param("x", f32, n, "read"), k.Param("y", f32, n, "write")],
                    [k.Loop("i", n, [k.Store("y", i, k.Load("x", i, f32))], kind="vector")])


def test_an_object_for_this_machine_can_be_loaded():
    assert LlvmCpuLoader().can_load(targets.parse("host")) is None


@pytest.mark.skipif(not IS_X86, reason="the missing-feature case needs an x86 host")
def test_an_object_using_features_this_cpu_lacks_is_refused_with_the_fix():
    host = {f for f, on in llvm.get_host_cpu_features().items() if on}
    lacking = next((row for row in targets.TABLE if row.family == "x86_64" and not set(row.features) <= host), None)
    if lacking is None:
        pytest.skip("this CPU has every feature of every x86 row")
    reason = LlvmCpuLoader().can_load(targets.describe_row(lacking))
    missing = sorted(set(lacking.features) - host)
    assert missing[0] in reason and "--target llvm-cpu:host" in reason and "\n" not in reason


@pytest.mark.skipif(not IS_X86, reason="cross-compiles from x86 to aarch64")
def test_an_aarch64_object_is_produced_on_an_x86_host_but_not_loaded():
    binary = compile_kernels([copy_kernel()], targets.parse("neoverse-v1"))
    assert binary.data[:4] == b"\x7fELF"
    assert int.from_bytes(binary.data[18:20], "little") == ELF_MACHINE_AARCH64
    reason = LlvmCpuLoader().can_load(binary.target)
    assert "aarch64" in reason and "--target llvm-cpu:host" in reason


def test_the_local_task_driver_refuses_an_object_it_cannot_run():
    device = LOCAL_TASK.create("0")
    other = "neoverse-n1" if IS_X86 else "x86-64"
    with pytest.raises(UnknownDeviceError, match="llvm-cpu:host"):
        device.load_executable(compile_kernels([copy_kernel()], targets.parse(other)))


def test_the_local_task_driver_runs_every_workgroup_of_a_dispatch():
    groups, tile = 8, 256
    w, j = k.Var("w"), k.Var("j")
    idx = w * tile + j
    kern = k.Kernel("scale", [k.Param("x", f32, groups * tile, "read"), k.Param("y", f32, groups * tile, "write")],
                    [k.Loop("j", tile, [k.Store("y", idx, k.Binary("mul", k.Load("x", idx, f32), k.const(2, f32)))],
                            kind="vector")],
                    workgroup_count=(groups, 1, 1), workgroup_vars=("w",))
    device = LOCAL_TASK.create("0")
    exe = device.load_executable(compile_kernels([kern], targets.parse("host")))
    x = np.arange(groups * tile, dtype=np.float32)
    bx, by = device.allocate(x.nbytes), device.allocate(x.nbytes)
    device.write(bx, 0, x)
    cb = device.command_buffer()
    cb.dispatch(exe, 0, [(bx, 0, x.nbytes), (by, 0, x.nbytes)])
    cb.end()
    device.submit(cb)
    np.testing.assert_array_equal(device.read(by, 0, x.nbytes).view(np.float32), 2 * x)
