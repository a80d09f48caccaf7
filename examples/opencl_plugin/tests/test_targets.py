"""The opencl profile table: every spelling resolves to one row, unknown names suggest, host follows the device."""

import pytest
from retarget.errors import UnknownTargetError
from retarget_opencl import FORMAT, targets
from retarget_opencl.driver import OPENCL


def test_each_spelling_belongs_to_exactly_one_row():
    spellings = [n for row in targets.TABLE for n in (row.name, *row.aliases)]
    assert len(spellings) == len(set(spellings))


def test_a_row_describes_its_limits_and_extensions():
    desc = targets.parse("amd")
    assert (desc.backend, desc.format, desc.max_workgroup_size, desc.shared_memory_bytes) == ("opencl", FORMAT, 256,
                                                                                            64 * 1024)
    assert desc.fp16 and desc.features == ("cl_khr_fp16", "cl_khr_fp64") and desc.subgroup_size == 64
    assert not targets.parse("nvidia").fp16


def test_spellings_ignore_case_and_separators():
    assert targets.parse("Intel_GPU").arch == "intel-gpu"
    assert targets.parse("POCL").arch == "pocl-cpu"


def test_an_unknown_name_suggests_the_closest():
    with pytest.raises(UnknownTargetError, match="nvidia"):
        targets.parse("nvida")


def test_the_default_runs_anywhere_and_says_so_on_one_line():
    desc, note = targets.default()
    assert desc.arch == "opencl-1.2" and desc.features == () and "\n" not in note and "opencl:host" in note


def test_host_is_the_first_device_or_an_error_naming_a_profile():
    devices = [d for d in OPENCL.enumerate() if d.available]
    if not devices:
        with pytest.raises(UnknownTargetError, match="opencl:opencl-1.2"):
            targets.parse("host")
        return
    desc, props = targets.parse("host"), devices[0].properties
    assert desc.arch == "host" and desc.max_workgroup_size == props["max_workgroup_size"]
    assert desc.shared_memory_bytes == props["local_memory_bytes"]
    assert set(desc.features) <= set(props["extensions"])
