"""The cuda driver without a GPU, and the rule that decides which executables a GPU can run."""

import pytest
import retarget
from retarget.errors import UnknownDeviceError
from retarget.plugin_manager import manager
from retarget.testing.graphs import mlp_module
from retarget_cuda import targets
from retarget_cuda.driver import CUDA, _why_not


@pytest.fixture
def no_gpu():
    if any(d.available for d in CUDA.enumerate()):
        pytest.skip("this machine has a CUDA GPU")


def test_enumerate_without_a_gpu_reports_one_unavailable_device_with_the_reason(no_gpu):
    (info,) = CUDA.enumerate()
    assert info.driver == "cuda" and not info.available
    assert info.reason and "\n" not in info.reason


def test_create_and_dump_without_a_gpu_say_why(no_gpu):
    with pytest.raises(UnknownDeviceError) as e:
        CUDA.create("0")
    assert CUDA.enumerate()[0].reason in str(e.value)
    dump = CUDA.dump("0")
    assert dump["available"] is False and dump["reason"] == CUDA.enumerate()[0].reason


def test_loading_on_cuda_without_a_gpu_fails_with_the_reason(no_gpu):
    module, _, _ = mlp_module()
    art = retarget.compile(module, "vmvx")
    with pytest.raises(UnknownDeviceError, match="no usable device"):
        retarget.load(art, device="cuda")


def test_the_plugin_registers_the_driver():
    assert manager().by_name("retarget_drivers")["cuda"] is CUDA


@pytest.mark.parametrize("arch, cc", [("sm_90a", (9, 0)), ("sm_80", (8, 0)), ("sm_80", (8, 6)), ("sm_86", (8, 9))])
def test_a_cubin_runs_on_its_own_sm_and_newer_minors_of_its_major(arch, cc):
    assert _why_not(targets.parse(arch), cc, "GPU") is None


@pytest.mark.parametrize("arch, cc", [("sm_80", (9, 0)), ("sm_89", (12, 0)), ("sm_90", (10, 0))])
def test_ptx_of_an_older_arch_is_jit_compiled_on_a_newer_gpu(arch, cc):
    assert _why_not(targets.parse(arch), cc, "GPU") is None


def test_arch_specific_code_runs_only_on_its_own_gpu():
    reason = _why_not(targets.parse("sm_90a"), (10, 0), "NVIDIA B200")
    assert "sm_90a" in reason and "sm_100" in reason and "NVIDIA B200" in reason
    assert "--target cuda:host" in reason


def test_code_for_a_newer_gpu_is_refused_with_both_archs_and_the_fix():
    reason = _why_not(targets.parse("sm_90"), (8, 0), "NVIDIA A100")
    assert "sm_90" in reason and "sm_80" in reason and "--target cuda:host" in reason
