"""The hip driver without ROCm or an AMD GPU, the rule that decides which code objects a GPU runs, and
that importing the plugin never fails."""

import subprocess
import sys
import textwrap

import pytest
import retarget
from retarget.errors import UnknownDeviceError
from retarget.plugin_manager import manager
from retarget.testing.graphs import mlp_module
from retarget_rocm import driver as hip_driver
from retarget_rocm import targets
from retarget_rocm.driver import HIP, why_not


@pytest.fixture
def no_gpu():
    if any(d.available for d in HIP.enumerate()):
        pytest.skip("this machine has an AMD GPU")


def test_enumerate_without_a_gpu_reports_one_unavailable_device_with_the_reason(no_gpu):
    (info,) = HIP.enumerate()
    assert info.driver == "hip" and not info.available
    assert info.reason and "\n" not in info.reason
    assert "ROCm" in info.reason or "AMD GPU" in info.reason


def test_create_and_dump_without_a_gpu_say_why(no_gpu):
    with pytest.raises(UnknownDeviceError) as e:
        HIP.create("0")
    assert HIP.enumerate()[0].reason in str(e.value)
    dump = HIP.dump("0")
    assert dump["available"] is False and dump["reason"] == HIP.enumerate()[0].reason


def test_loading_on_hip_without_a_gpu_fails_with_the_reason(no_gpu):
    module, _, _ = mlp_module()
    art = retarget.compile(module, "vmvx")
    with pytest.raises(UnknownDeviceError, match="no usable device"):
        retarget.load(art, device="hip")


def test_the_plugin_registers_the_driver():
    assert manager().by_name("retarget_drivers")["hip"] is HIP


@pytest.mark.parametrize("error, words", [("hipErrorNoDevice", "sees no AMD GPU"),
                                          ("hipErrorInvalidDevice", "hipInit failed: hipErrorInvalidDevice")])
def test_a_runtime_without_a_usable_gpu_is_reported_not_raised(monkeypatch, error, words):
    import enum

    class Error(enum.Enum):
        hipSuccess = 0
        hipErrorInvalidDevice = 101
        hipErrorNoDevice = 100

    class FakeHip:
        hipError_t = Error

        @staticmethod
        def hipInit(flags):
            return (Error[error],)

    monkeypatch.setattr(hip_driver, "_hip", lambda: FakeHip)
    ok, reason = hip_driver._initialize()
    assert not ok and words in reason


def test_importing_the_plugin_and_enumerating_never_fails_without_hip_python():
    script = textwrap.dedent("""
        import sys

        class NoHip:  # as if hip-python were not installed
            def find_spec(self, name, path=None, target=None):
                if name == "hip" or name.startswith(("hip.", "rocm")):
                    raise ImportError("no hip-python here")

        sys.meta_path.insert(0, NoHip())
        import retarget_rocm, retarget_rocm.plugin, retarget_rocm.driver, retarget_rocm.targets
        (info,) = retarget_rocm.driver.HIP.enumerate()
        assert not info.available and "hip-python is not importable" in info.reason, info.reason
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_code_object_runs_on_its_own_gfx_only():
    assert why_not(targets.parse("gfx942"), "gfx942", "AMD Instinct MI300X") is None
    reason = why_not(targets.parse("gfx90a"), "gfx942", "AMD Instinct MI300X")
    assert "gfx90a" in reason and "gfx942" in reason and "MI300X" in reason
    assert "--target rocm:host" in reason


def test_wave64_code_is_refused_on_an_rdna_gpu_of_another_gfx():
    reason = why_not(targets.parse("gfx942"), "gfx1100", "Radeon RX 7900 XTX")
    assert reason is not None and "rocm:gfx1100" in reason
