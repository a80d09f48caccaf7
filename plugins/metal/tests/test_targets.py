"""The metal-spirv target table: every spelling resolves to a fully described row, MSL versions gate
features, unknown names suggest, and host follows the live device (none on Linux)."""

import sys

import pytest
from retarget.compiler import resolve_target
from retarget.errors import UnknownTargetError
from retarget.plugin_manager import manager
from retarget_metal import FORMAT, targets
from retarget_metal.driver import METAL


def _spellings():
    return [n for n in targets.names() if n not in targets.HOST_SPELLINGS]


def test_every_spelling_resolves_to_a_fully_described_row():
    for spelling in _spellings():
        desc = targets.parse(spelling)
        extra = desc.extra
        assert desc.backend == "metal-spirv" and desc.format == FORMAT == "msl", spelling
        assert desc.subgroup_size == 32 and desc.subgroup_sizes == (32,)
        assert desc.max_workgroup_size == 1024 and desc.shared_memory_bytes == 32 * 1024
        assert desc.fp16 and "simdgroup-matrix" in desc.features
        assert extra["family"] == f"apple{extra['family_number']}" and extra["family_number"] in targets.FAMILIES
        version = targets.MSL_VERSIONS[extra["msl"]]
        assert extra["language_version"] == version.language_version
        assert (extra["min_macos"], extra["min_ios"]) == (version.macos, version.ios)
        assert extra["multiprocessors"] == extra["gpu_cores"]
        assert ("bf16" in desc.features) == (version.key >= (3, 1)) == ("simdgroup_matrix.8x8.bf16" in
                                                                        desc.matrix_units)
        assert "simdgroup_matrix.8x8.f32" in desc.matrix_units and extra["note"]


def test_each_name_belongs_to_exactly_one_row():
    spellings = [n for chip in targets.CHIPS for n in (chip.name, *chip.aliases)]
    spellings += list(targets.BY_FAMILY) + list(targets.BY_LANGUAGE)
    assert len(spellings) == len(set(spellings))


def test_the_language_versions_are_metal_s_enum_values():
    assert targets.MSL_VERSIONS["2.3"].language_version == 131075  # MTLLanguageVersion2_3
    assert targets.MSL_VERSIONS["3.0"].language_version == 196608
    assert targets.MSL_VERSIONS["3.1"].language_version == 196609
    assert targets.MSL_VERSIONS["4.0"].language_version == 262144


@pytest.mark.parametrize("spelling, arch, family, cores, msl", [
    ("apple-m1", "apple-m1", 7, 8, "2.3"),
    ("M1 Pro", "apple-m1-pro", 7, 16, "2.4"),
    ("m1_ultra", "apple-m1-ultra", 7, 64, "2.4"),
    ("apple-m2-max", "apple-m2-max", 8, 38, "3.0"),
    ("m3", "apple-m3", 9, 10, "3.1"),
    ("apple-m4-max", "apple-m4-max", 9, 40, "3.2"),
    ("m5", "apple-m5", 10, 10, "4.0"),
    ("a14", "a14", 7, 4, "2.3"),
    ("a16-bionic", "a16", 8, 5, "3.0"),
    ("a17", "a17-pro", 9, 6, "3.1"),
    ("apple-a18-pro", "a18-pro", 9, 6, "3.2"),
])
def test_chips_and_their_spellings(spelling, arch, family, cores, msl):
    desc = targets.parse(spelling)
    assert (desc.arch, desc.extra["family_number"], desc.extra["gpu_cores"], desc.extra["msl"]) == \
        (arch, family, cores, msl)
    assert desc.spec == spelling


def test_every_family_has_a_row_and_its_chips():
    for number, family in targets.FAMILIES.items():
        desc = targets.parse(family.name)
        assert desc.arch == family.name and desc.extra["msl"] == family.first_msl
        assert desc.extra["gpu_cores"] is None  # a family has no one core count; the lowering uses its default
        assert any(chip.family == number for chip in targets.CHIPS)


def test_an_msl_version_alone_is_any_apple_silicon_gpu_with_that_language():
    desc = targets.parse("msl3.1")
    assert desc.arch == "msl3.1" and desc.extra["family"] == "apple7" and "bf16" in desc.features
    assert targets.parse("metal3.2").extra["msl"] == "3.2"
    assert "bf16" not in targets.parse("msl3.0").features


def test_plus_msl_picks_the_language_version_of_a_chip():
    desc = targets.parse("apple-m1+msl3.1")
    assert desc.arch == "apple-m1+msl3.1" and desc.extra["msl"] == "3.1" and "bf16" in desc.features
    assert desc.extra["gpu_cores"] == 8 and desc.extra["family_number"] == 7
    assert targets.parse("m3+3.2").arch == "apple-m3+msl3.2"
    assert targets.parse("m3+msl3.1").arch == "apple-m3"  # its own version: the plain name
    assert targets.parse("apple9+msl3.2").arch == "apple9+msl3.2"


def test_an_unknown_msl_version_lists_the_known_ones():
    with pytest.raises(UnknownTargetError, match="msl3.1"):
        targets.parse("m1+msl9.9")


def test_an_unknown_name_raises_with_the_closest_names():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("apple-m3-maxx")
    assert "apple-m3-max" in str(e.value) and "host" in str(e.value)


@pytest.mark.skipif(sys.platform == "darwin", reason="off macOS there is no Metal device")
def test_host_off_macos_says_there_is_no_metal_device():
    with pytest.raises(UnknownTargetError, match="Metal needs macOS") as e:
        targets.parse("host")
    assert "metal-spirv:apple-m1" in str(e.value)


@pytest.mark.skipif(sys.platform == "darwin", reason="off macOS there is no Metal device")
def test_the_default_off_macos_is_the_m1_with_a_one_line_note():
    desc, note = targets.default()
    assert desc.arch == "apple-m1" and "\n" not in note and "every Apple silicon Mac" in note


def test_host_and_the_default_follow_the_device(fake_metal):
    desc = targets.parse("host")
    assert desc.arch == "host" and desc.extra["family"] == "apple7" and desc.extra["gpu_cores"] == 8
    assert desc.extra["msl"] == "3.1" and "bf16" in desc.features  # the macOS's version, not the M1's first
    assert targets.parse("host+msl2.4").extra["msl"] == "2.4"
    default, note = targets.default()
    assert default.arch == "host" and "Apple M1" in note


def test_a_device_newer_than_the_table_gets_its_newest_family(fake_metal, monkeypatch):
    import fake_metal as fake

    monkeypatch.setattr(fake, "APPLE_FAMILY", 12)
    monkeypatch.setattr(fake.DEVICE, "_name", "Apple M9")
    desc = targets.parse("host")
    assert desc.extra["family_number"] == max(targets.FAMILIES) and desc.extra["gpu_cores"] is None


def test_the_plugin_contributes_the_target_and_the_driver():
    assert "metal-spirv" in manager().by_name("retarget_targets")
    assert manager().by_name("retarget_drivers")["metal"] is METAL
    _, desc, note = resolve_target("metal-spirv:m2")
    assert desc.arch == "apple-m2" and note is None
