"""Every driver whose library is missing, or fails when it starts: `enumerate` reports it unavailable with
the reason and never raises, `retarget devices` and `retarget doctor` show it, and opening it is a clear
error (`kit.assert_unavailable`). Each break is made in this process (the library's import or its init
call replaced), so the tests run on any machine; the out-of-tree OpenCL plugin has its own, in
examples/opencl_plugin/tests/test_driver.py."""

from __future__ import annotations

import enum
import importlib
import json
import threading
from types import SimpleNamespace

import pytest
import retarget
from retarget.errors import UnknownDeviceError
from retarget.plugin_manager import manager
from retarget.testing.conformance import kit


def _raises(error: BaseException):
    def call(*args, **kwargs):
        raise error

    return call


def _plugin(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} is not installed ({e})")


# -- the breaks: driver -> scenario -> (install(monkeypatch), words the reason holds) ----------------------


class _CuResult(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_OPERATING_SYSTEM = 304


class _HipError(enum.Enum):
    hipSuccess = 0
    hipErrorNoDevice = 100
    hipErrorInvalidDevice = 101


def _cuda(mp, library):
    driver = _plugin("retarget_cuda.driver")
    mp.setattr(driver, "_init_result", None)  # cuInit runs again, into the break
    mp.setattr(driver, "_cu", library)


def _hip(mp, library):
    driver = _plugin("retarget_rocm.driver")
    mp.setattr(driver, "_init_result", None)
    mp.setattr(driver, "_hip", library)


def _fake_cu(init):
    return lambda: SimpleNamespace(CUresult=_CuResult, cuInit=init)


def _fake_hip(init):
    return lambda: SimpleNamespace(hipError_t=_HipError, hipInit=init)


def _vulkan(mp, **replaced):
    driver = _plugin("retarget_vulkan_spirv.driver")
    mp.setattr(driver, "_instance_state", None)  # the instance is made again, into the break
    mp.setattr(driver, "_physical", None)
    mp.setattr(driver.VULKAN, "_devices", {})
    for name, value in replaced.items():
        mp.setattr(driver, name, value)


def _webgpu(mp, wgpu):
    driver = _plugin("retarget_webgpu.driver")
    mp.setattr(driver, "_adapters_found", None)
    mp.setattr(driver.WEBGPU, "_devices", {})
    mp.setattr(driver, "_wgpu", wgpu)


def _fake_wgpu(enumerate_adapters):
    return lambda: SimpleNamespace(gpu=SimpleNamespace(enumerate_adapters_sync=enumerate_adapters))


def _metal(mp, platform: str, metal=None):
    driver = _plugin("retarget_metal.driver")
    mp.setattr(driver, "sys", SimpleNamespace(platform=platform))
    if metal is not None:
        mp.setattr(driver, "_metal", metal)


def _fake_metal(all_devices):
    return lambda: SimpleNamespace(MTLCopyAllDevices=all_devices, MTLCreateSystemDefaultDevice=lambda: None)


BREAKS = {
    "cuda": {
        "cuda-bindings missing": (lambda mp: _cuda(mp, _raises(ImportError("No module named 'cuda'"))),
                                  ["cuda-bindings is not importable", "pip install cuda-bindings"]),
        "libcuda.so missing": (lambda mp: _cuda(mp, _fake_cu(_raises(RuntimeError("libcuda.so.1: cannot open")))),
                               ["libcuda.so (the NVIDIA driver) cannot be loaded", "libcuda.so.1: cannot open"]),
        "no GPU": (lambda mp: _cuda(mp, _fake_cu(lambda flags: (_CuResult.CUDA_ERROR_NO_DEVICE,))),
                   ["sees no GPU", "CUDA_ERROR_NO_DEVICE"]),
        "cuInit fails": (lambda mp: _cuda(mp, _fake_cu(lambda flags: (_CuResult.CUDA_ERROR_OPERATING_SYSTEM,))),
                         ["cuInit failed: CUDA_ERROR_OPERATING_SYSTEM", "nvidia-smi"]),
    },
    "hip": {
        "hip-python missing": (lambda mp: _hip(mp, _raises(ImportError("No module named 'hip'"))),
                               ["hip-python is not importable", "pip install hip-python"]),
        "ROCm missing": (lambda mp: _hip(mp, _fake_hip(_raises(RuntimeError("b'libamdhip64.so: cannot open'")))),
                         ["the ROCm runtime (libamdhip64.so) cannot be loaded", "install ROCm"]),
        "no GPU": (lambda mp: _hip(mp, _fake_hip(lambda flags: (_HipError.hipErrorNoDevice,))),
                   ["sees no AMD GPU"]),
        "hipInit fails": (lambda mp: _hip(mp, _fake_hip(lambda flags: (_HipError.hipErrorInvalidDevice,))),
                          ["hipInit failed: hipErrorInvalidDevice", "rocminfo"]),
    },
    "vulkan": {
        "vulkan package missing": (lambda mp: _vulkan(mp, _vk=_raises(ImportError("No module named 'vulkan'"))),
                                   ["the `vulkan` package is not importable", "pip install vulkan"]),
        "libvulkan.so.1 missing": (lambda mp: _vulkan(mp, _vk=_raises(OSError("Cannot find Vulkan SDK version"))),
                                   ["libvulkan.so.1 (the Vulkan loader) cannot be loaded", "apt-get install"]),
        "instance fails": (lambda mp: _vulkan(mp, _create_instance=_raises(RuntimeError("ICD crashed"))),
                           ["Vulkan failed to start (RuntimeError: ICD crashed)"]),
    },
    "webgpu": {
        "wgpu missing": (lambda mp: _webgpu(mp, _raises(ImportError("No module named 'wgpu'"))),
                         ["wgpu is not importable", "pip install wgpu"]),
        "wgpu-native fails": (lambda mp: _webgpu(mp, _fake_wgpu(_raises(RuntimeError("libwgpu_native.so: bad")))),
                              ["wgpu found no adapter (RuntimeError: libwgpu_native.so: bad)"]),
        "no adapter": (lambda mp: _webgpu(mp, _fake_wgpu(lambda: [])),
                       ["wgpu found no adapter", "lavapipe"]),
    },
    "metal": {
        "not macOS": (lambda mp: _metal(mp, "linux"), ["Metal needs macOS"]),
        "PyObjC missing": (lambda mp: _metal(mp, "darwin", _raises(ImportError("No module named 'Metal'"))),
                           ["PyObjC's Metal bindings are not importable", "pip install pyobjc-framework-Metal"]),
        "no Metal device": (lambda mp: _metal(mp, "darwin", _fake_metal(lambda: [])),
                            ["Metal reports no device"]),
        "Metal fails": (lambda mp: _metal(mp, "darwin", _fake_metal(_raises(RuntimeError("MTLCopyAllDevices: bad")))),
                        ["RuntimeError: MTLCopyAllDevices: bad"]),
    },
}
CASES = [pytest.param(driver, scenario, id=f"{driver}: {scenario}") for driver, table in BREAKS.items()
         for scenario in table]


@pytest.mark.parametrize("driver, scenario", CASES)
def test_a_driver_without_its_library_is_listed_unavailable_with_the_reason_and_opening_it_says_why(
        monkeypatch, driver, scenario):
    install, words = BREAKS[driver][scenario]
    install(monkeypatch)
    kit.assert_unavailable(driver, *words)


def test_retarget_devices_and_doctor_show_every_broken_driver_with_its_reason(monkeypatch):
    """One break per driver at once; the CLI lists each reason, and doctor's smoke test still runs on the
    drivers that work."""
    from retarget.cli import app
    from typer.testing import CliRunner

    expected = {}
    for driver, table in BREAKS.items():
        scenario = next(iter(table))
        install, words = table[scenario]
        install(monkeypatch)
        expected[driver] = words[0]
    if not expected:
        pytest.skip("no GPU driver plugin is installed")
    runner = CliRunner()
    devices = json.loads(runner.invoke(app, ["devices", "--json"]).stdout)
    doctor = runner.invoke(app, ["doctor", "--json"])
    report = json.loads(doctor.stdout)
    for driver, words in expected.items():
        listed = [d for d in devices if d["device"].startswith(driver + ":")]
        assert listed and not listed[0]["available"] and words in listed[0]["reason"], (driver, listed)
        absent = [d for d in report["devices"] if d["device"].startswith(driver + ":")]
        assert absent and not absent[0]["available"] and words in absent[0]["reason"], (driver, absent)
        assert any(line.startswith("  absent ") and driver in line and words in line
                   for line in report["lines"]), driver
    assert doctor.exit_code == 0 and report["ok"], report["lines"]
    smoked = {s["device"] for s in report["smoke"]}
    assert {"local-sync:0", "local-task:0"} <= smoked  # the drivers that work (and any third party's, e.g. opencl)
    assert not any(device.startswith(driver + ":") for device in smoked for driver in expected)


def test_a_third_party_driver_whose_enumerate_raises_is_reported_not_raised(monkeypatch):
    class Broken:
        name = "broken-example"

        def enumerate(self):
            raise OSError("libexample.so: cannot open shared object file")

    drivers = manager().by_name("retarget_drivers")
    monkeypatch.setitem(drivers, "broken-example", Broken())
    (info,) = [d for d in retarget.devices() if d.driver == "broken-example"]
    assert not info.available and info.reason == "enumerate() raised OSError: libexample.so: cannot open shared " \
                                                 "object file"
    with pytest.raises(UnknownDeviceError, match="driver 'broken-example' has no usable device: enumerate"):
        retarget.load(retarget.compile(_mlp(), "vmvx"), device="broken-example")


def _mlp():
    from retarget.testing.graphs import mlp_module

    return mlp_module()[0]


# -- the local drivers: no library to miss; their executables' loaders, and their threads --------------------


def test_local_task_that_cannot_start_its_threads_says_so_when_opened_and_in_doctor(monkeypatch):
    from retarget.cli.doctor import diagnose
    from retarget.local_drivers import LOCAL_TASK

    monkeypatch.setattr(LOCAL_TASK, "_device", None)  # opened again, into the break
    monkeypatch.setattr(LOCAL_TASK, "workers", 4)
    start = threading.Thread.start

    def refuse_ours(thread):  # the OS refuses local-task's worker threads (anyone else's start as usual)
        if thread.name.startswith("retarget-local-"):
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_ours)
    with pytest.raises(UnknownDeviceError, match="local-task cannot start its 3 worker threads .can't start new "
                                                 "thread.") as e:
        retarget.load(retarget.compile(_mlp(), "vmvx"), device="local-task")
    assert "local-sync" in e.value.hint
    report = diagnose()
    failed = [s for s in report["smoke"] if s["device"] == "local-task:0"]
    assert failed and not any(s["pass"] for s in failed) and "cannot start its 3 worker threads" in failed[0]["reason"]
    assert not report["ok"]


@pytest.mark.parametrize("device", ["local-sync", "local-task"])
def test_a_local_driver_without_the_loader_of_a_module_s_code_names_the_target_whose_plugin_provides_it(
        monkeypatch, device):
    if "llvm-cpu" not in retarget.targets():
        pytest.skip("target llvm-cpu is not installed")
    artifact = retarget.compile(_mlp(), "llvm-cpu")
    opened = retarget.runtime.open_device(device)
    monkeypatch.setattr(opened, "loaders", {k: v for k, v in opened.loaders.items() if not k.startswith("llvm")})
    with pytest.raises(UnknownDeviceError) as e:
        retarget.load(artifact, device=device)
    assert "no executable loader for format" in str(e.value) and "the plugin of target 'llvm-cpu'" in str(e.value)
