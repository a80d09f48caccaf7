"""The opencl driver when pyopencl is missing, when no OpenCL driver (ICD) is installed, and when OpenCL fails:
listed unavailable with the reason, never raising, and opening it says why (`kit.assert_unavailable`)."""

from types import SimpleNamespace

import pytest
from retarget.testing.conformance import kit
from retarget_opencl import driver


class _ClError(Exception):
    pass


def _raises(error):
    def call(*args, **kwargs):
        raise error

    return call


def _fake_cl(get_platforms):
    return lambda: SimpleNamespace(Error=_ClError, get_platforms=get_platforms)


BREAKS = {
    "pyopencl missing": (_raises(ImportError("No module named 'pyopencl'")),
                         ["pyopencl is not importable", "pip install pyopencl"]),
    "no ICD": (_fake_cl(_raises(_ClError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR"))),
               ["no OpenCL platform is installed (no ICD)", "pocl-opencl-icd"]),
    "OpenCL fails": (_fake_cl(_raises(RuntimeError("ICD loader crashed"))),
                     ["OpenCL failed to list devices (RuntimeError: ICD loader crashed)"]),
    "no device": (_fake_cl(lambda: [SimpleNamespace(get_devices=lambda: [])]), ["the OpenCL platforms list no device"]),
}


@pytest.mark.parametrize("scenario", list(BREAKS))
def test_opencl_without_its_library_is_listed_unavailable_and_opening_it_says_why(monkeypatch, scenario):
    library, words = BREAKS[scenario]
    monkeypatch.setattr(driver, "_cl", library)
    monkeypatch.setattr(driver.OPENCL, "_open", {})
    kit.assert_unavailable("opencl", *words)
