"""The webgpu-spirv profile table: every spelling resolves, unknown names suggest, host follows the adapter."""

import pytest
from retarget.compiler import resolve_target
from retarget.errors import UnknownTargetError
from retarget.plugin_manager import manager
from retarget_webgpu import FORMAT, targets
from retarget_webgpu.driver import WEBGPU


def test_every_spelling_resolves_to_a_fully_described_profile():
    for spelling in [n for n in targets.names() if n not in targets.HOST_SPELLINGS]:
        desc = targets.parse(spelling)
        assert desc.backend == "webgpu-spirv" and desc.format == FORMAT == "wgsl"
        assert desc.subgroup_size is None and desc.max_workgroup_size == 256
        assert set(desc.extra["limits"]) == set(targets.LIMIT_KEYS)
        assert desc.shared_memory_bytes == desc.extra["limits"]["max-compute-workgroup-storage-size"]
        assert desc.fp16 == ("shader-f16" in desc.features)


def test_each_name_belongs_to_exactly_one_row():
    spellings = [n for row in targets.TABLE for n in (row.name, *row.aliases)]
    assert len(spellings) == len(set(spellings))


def test_the_webgpu_profile_is_the_spec_defaults():
    limits = targets.parse("webgpu").extra["limits"]
    assert limits["max-storage-buffers-per-shader-stage"] == 8
    assert limits["max-compute-invocations-per-workgroup"] == 256
    assert limits["max-compute-workgroup-storage-size"] == 16 * 1024
    assert limits["max-compute-workgroups-per-dimension"] == 65535
    assert limits["min-storage-buffer-offset-alignment"] == 256
    assert targets.parse("webgpu").features == ()


def test_browser_profiles_and_spellings():
    assert targets.parse("Chrome").arch == "chrome-desktop"
    assert targets.parse("safari").arch == "safari-apple"
    assert targets.parse("firefox_desktop").arch == "firefox-desktop"
    assert targets.parse("android").arch == "chrome-android"
    assert targets.parse("default").arch == "webgpu"


def test_an_unknown_name_raises_with_the_closest_names():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("chrom")
    assert "chrome" in str(e.value)


def test_the_default_is_the_spec_limits_with_a_one_line_note():
    desc, note = targets.default()
    assert desc.arch == "webgpu" and "\n" not in note and "default limits" in note


def test_host_is_the_adapter_s_limits():
    infos = [d for d in WEBGPU.enumerate() if d.available]
    if not infos:
        with pytest.raises(UnknownTargetError, match="webgpu-spirv:webgpu"):
            targets.parse("host")
        return
    desc = targets.parse("host")
    assert desc.arch == "host"
    assert desc.extra["limits"] == {k: infos[0].properties["limits"][k] for k in targets.LIMIT_KEYS}


def test_the_plugin_contributes_the_target_and_the_driver():
    assert "webgpu-spirv" in manager().by_name("retarget_targets")
    assert manager().by_name("retarget_drivers")["webgpu"] is WEBGPU
    _, desc, note = resolve_target("webgpu-spirv:chrome")
    assert desc.arch == "chrome-desktop" and note is None
