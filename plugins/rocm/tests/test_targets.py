"""The AMDGPU target table: every spelling, the wavefront of each generation, and the default."""

import pytest
from retarget.compiler import resolve_target
from retarget.errors import UnknownTargetError
from retarget.plugin_manager import manager
from retarget_rocm import FORMAT, targets
from retarget_rocm.driver import HIP

CDNA = ("cdna1", "cdna2", "cdna3", "cdna4")
RDNA = ("rdna1", "rdna2", "rdna3", "rdna3.5", "rdna4")


def _table_spellings():
    return [n for n in targets.names() if n not in targets.HOST_SPELLINGS]


def _no_gpu():
    if any(d.available for d in HIP.enumerate()):
        pytest.skip("this machine has an AMD GPU: host and the default are its gfx")


def test_every_spelling_resolves_to_a_fully_described_arch():
    for spelling in _table_spellings():
        desc = targets.parse(spelling)
        row = targets.BY_GFX[desc.arch]
        assert desc.backend == "rocm" and desc.format == FORMAT and desc.arch.startswith("gfx")
        assert desc.extra["gfx"] == desc.arch and desc.extra["mach"] == row.mach
        assert desc.extra["code_name"] in targets.GENERATIONS
        assert desc.max_workgroup_size == 1024 and desc.max_workgroup_dims == (1024, 1024, 1024)
        assert desc.shared_memory_bytes == desc.extra["lds_bytes"] >= 64 * 1024
        assert desc.subgroup_size == desc.extra["wavefront_size"] in desc.subgroup_sizes
        assert desc.fp16 and f"wave{desc.subgroup_size}" in desc.features
        assert desc.extra["llvm"] >= 6


def test_rdna_runs_wave32_and_gcn_and_cdna_wave64():
    for row in targets.TABLE:
        desc = targets.describe_row(row)
        if row.generation.startswith("rdna"):
            assert int(row.gfx[3:5]) >= 10 and desc.subgroup_size == 32 and desc.subgroup_sizes == (32, 64), row.gfx
        else:
            assert row.gfx.startswith("gfx9") and desc.subgroup_size == 64 and desc.subgroup_sizes == (64,), row.gfx


def test_each_name_belongs_to_exactly_one_row_and_each_row_has_its_own_mach():
    spellings = [targets.key(n) for row in targets.TABLE for n in (row.gfx, *row.aliases)]
    assert len(spellings) == len(set(spellings))
    machs = [row.mach for row in targets.TABLE]
    assert len(machs) == len(set(machs))


def test_the_table_covers_gfx900_to_gfx950_and_gfx1010_to_gfx1201():
    for gfx in ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1012", "gfx1030",
                "gfx1032", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201"):
        assert targets.parse(gfx).arch == gfx


def test_generations_and_products_name_their_gfx():
    expected = {
        "gcn5": "gfx900", "cdna1": "gfx908", "cdna2": "gfx90a", "cdna3": "gfx942", "cdna4": "gfx950",
        "rdna1": "gfx1010", "rdna2": "gfx1030", "rdna3": "gfx1100", "rdna4": "gfx1201",
        "mi25": "gfx900", "mi50": "gfx906", "mi60": "gfx906", "mi100": "gfx908", "mi210": "gfx90a", "mi250": "gfx90a",
        "mi250x": "gfx90a", "mi300a": "gfx942", "mi300x": "gfx942", "mi308x": "gfx942", "mi325x": "gfx942",
        "mi350x": "gfx950", "mi355x": "gfx950",
        "rx5700xt": "gfx1010", "rx6800xt": "gfx1030", "rx6900xt": "gfx1030", "rx6700xt": "gfx1031",
        "rx6600": "gfx1032", "rx7900xtx": "gfx1100", "rx7900xt": "gfx1100", "rx7800xt": "gfx1101",
        "rx7600": "gfx1102", "w7900": "gfx1100", "w7800": "gfx1100", "rx9070xt": "gfx1201", "rx9070": "gfx1201",
        "rx9060xt": "gfx1200", "strix-halo": "gfx1151",
    }
    assert {name: targets.parse(name).arch for name in expected} == expected
    for name in expected:
        assert name in targets.names()


def test_spellings_are_case_separator_and_vendor_insensitive():
    assert targets.parse("MI300X").arch == "gfx942"
    assert targets.parse("AMD Instinct MI250X").arch == "gfx90a"
    assert targets.parse("Radeon RX 7900 XTX").arch == "gfx1100"
    assert targets.parse("AMD Radeon PRO W7900").arch == "gfx1100"
    assert targets.parse("GFX90A").arch == "gfx90a"
    assert targets.parse("RDNA 3.5").arch == "gfx1150"
    assert targets.parse("mi300x").spec == "mi300x"


def test_a_target_id_with_xnack_or_sramecc_names_its_gfx():
    assert targets.parse("gfx90a:sramecc+:xnack-").arch == "gfx90a"
    assert targets.parse("gfx942:xnack+").arch == "gfx942"


def test_matrix_cores_follow_the_generation():
    assert targets.parse("gfx906").matrix_units == () and targets.parse("gfx1030").matrix_units == ()
    assert "v_mfma_f32_16x16x16f16" in targets.parse("mi100").matrix_units
    assert "v_mfma_f64_16x16x4f64" in targets.parse("gfx90a").matrix_units
    assert "v_mfma_f64_16x16x4f64" not in targets.parse("gfx908").matrix_units
    assert any("fp8" in u for u in targets.parse("gfx942").matrix_units)
    assert any("f8f6f4" in u for u in targets.parse("gfx950").matrix_units)
    assert "v_wmma_f32_16x16x16_f16" in targets.parse("gfx1100").matrix_units
    assert any("fp8" in u for u in targets.parse("gfx1201").matrix_units)
    assert not any("fp8" in u for u in targets.parse("gfx1100").matrix_units)
    assert "mfma" in targets.parse("gfx942").features and "wmma" in targets.parse("gfx1201").features


def test_cdna4_has_160_kb_of_lds_and_the_others_64():
    assert targets.parse("gfx950").shared_memory_bytes == 160 * 1024
    assert {targets.describe_row(r).shared_memory_bytes for r in targets.TABLE if r.gfx != "gfx950"} == {64 * 1024}


def test_llvmlite_s_llvm_targets_every_row():
    import llvmlite.binding as llvm

    newest = max(row.llvm for row in targets.TABLE)
    assert llvm.llvm_version_info[0] >= newest


def test_an_unknown_name_raises_with_the_closest_names():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("gfx943")
    assert "gfx942" in str(e.value)
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("mi301x")
    assert "mi300x" in str(e.value)
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("gfx940")  # an engineering sample that LLVM 21 dropped
    assert "gfx942" in str(e.value)


def test_the_default_without_a_gpu_is_gfx942_with_a_one_line_note():
    _no_gpu()
    desc, note = targets.default()
    assert desc.arch == "gfx942" and desc.subgroup_size == 64
    assert "\n" not in note and "gfx942" in note and "no AMD GPU" in note


def test_host_without_a_gpu_says_why_and_what_to_use_instead():
    _no_gpu()
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("host")
    assert HIP.enumerate()[0].reason in str(e.value) and "rocm:gfx942" in str(e.value)


def test_host_on_a_gpu_is_the_gpu_s_own_gfx(hip_device):
    assert targets.parse("host").arch == hip_device.gfx


def test_a_device_s_gfx_outside_the_table_is_refused_with_the_reason():
    with pytest.raises(UnknownTargetError, match="gfx1250"):
        targets.describe_device("gfx1250", "host")
    assert targets.describe_device("gfx942:sramecc+:xnack-", "host", 304).extra["multiprocessors"] == 304


def test_the_plugin_contributes_the_target_and_the_driver():
    assert "rocm" in manager().by_name("retarget_targets")
    assert "hip" in manager().by_name("retarget_drivers")
    _, desc, note = resolve_target("rocm:mi300x")
    assert desc.arch == "gfx942" and note is None


def test_mfma_fragment_shapes_follow_the_generation():
    def shapes(arch):
        return [(f["m"], f["n"], f["k"], f["a"], f["acc"], f["width"]) for f in targets.parse(arch).extra["fragments"]]

    assert shapes("gfx906") == shapes("gfx1030") == shapes("gfx1100") == shapes("gfx1201") == []
    assert shapes("gfx908") == [(16, 16, 16, "f16", "f32", 64)]
    for arch in ("gfx90a", "gfx942", "gfx950"):
        assert shapes(arch) == [(16, 16, 16, "f16", "f32", 64), (16, 16, 16, "bf16", "f32", 64)], arch
