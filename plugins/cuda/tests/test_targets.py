import pytest
from retarget.compiler import resolve_target
from retarget.errors import UnknownTargetError
from retarget.plugin_manager import manager
from retarget_cuda import FORMAT, targets
from retarget_cuda.driver import CUDA


def _table_spellings():
    return [n for n in targets.names() if n not in targets.HOST_SPELLINGS]


def test_every_spelling_resolves_to_a_fully_described_arch():
    for spelling in _table_spellings():
        desc = targets.parse(spelling)
        assert desc.backend == "cuda" and desc.format == FORMAT
        assert desc.arch == "sm_" + desc.extra["sm"]
        assert desc.extra["ptx"] == "compute_" + desc.extra["sm"]
        assert desc.subgroup_size == 32 and desc.subgroup_sizes == (32,)
        assert desc.max_workgroup_size == 1024 and desc.max_workgroup_dims == (1024, 1024, 64)
        assert desc.shared_memory_bytes == 48 * 1024
        assert desc.extra["shared_memory_optin_bytes"] >= desc.shared_memory_bytes
        assert desc.extra["shared_memory_per_sm_bytes"] >= desc.extra["shared_memory_optin_bytes"]
        assert desc.extra["code_name"] in ("maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper",
                                           "blackwell")
        major, minor = desc.extra["compute_capability"].split(".")
        assert desc.extra["sm"].rstrip("a") == major + minor


def test_each_name_belongs_to_exactly_one_row():
    spellings = [n for row in targets.TABLE for n in (row.name, row.sm, *row.aliases)]
    assert len(spellings) == len(set(spellings))


def test_the_table_covers_maxwell_to_blackwell_and_current_products():
    for name in ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100",
                 "sm_100a", "sm_120", "sm_121"):
        assert targets.parse(name).arch == name
    expected = {"maxwell": "sm_52", "pascal": "sm_60", "volta": "sm_70", "turing": "sm_75", "ampere": "sm_80",
                "ada": "sm_89", "hopper": "sm_90a", "blackwell": "sm_100a",
                "p100": "sm_60", "v100": "sm_70", "t4": "sm_75", "a10": "sm_86", "a30": "sm_80", "a100": "sm_80",
                "l4": "sm_89", "l40s": "sm_89", "rtx2080ti": "sm_75", "rtx3080": "sm_86", "rtx3090": "sm_86",
                "rtx4090": "sm_89", "rtx5090": "sm_120", "h100": "sm_90a", "h200": "sm_90a", "gh200": "sm_90a",
                "b100": "sm_100a", "b200": "sm_100a", "gb200": "sm_100a"}
    assert {name: targets.parse(name).arch for name in expected} == expected


def test_spellings_are_case_and_separator_insensitive():
    assert targets.parse("SM_90A").arch == "sm_90a"
    assert targets.parse("sm90a").arch == "sm_90a"
    assert targets.parse("90a").arch == "sm_90a"
    assert targets.parse("RTX 4090").arch == "sm_89"
    assert targets.parse("H100").spec == "H100"


def test_matrix_units_follow_the_architecture():
    assert targets.parse("sm_75").matrix_units and "mma.m16n8k16.f16" not in targets.parse("sm_75").matrix_units
    assert "mma.m16n8k16.f16" in targets.parse("sm_80").matrix_units
    assert not any(u.startswith("wgmma") for u in targets.parse("sm_90").matrix_units)
    assert any(u.startswith("wgmma") for u in targets.parse("sm_90a").matrix_units)
    assert any(u.startswith("tcgen05") for u in targets.parse("sm_100a").matrix_units)
    assert targets.parse("sm_52").matrix_units == ()


def test_fp16_and_int8_support_follow_the_architecture():
    assert not targets.parse("sm_52").fp16 and targets.parse("sm_53").fp16
    assert not targets.parse("sm_60").int8 and targets.parse("sm_61").int8


def test_an_unknown_name_raises_with_the_closest_names():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("h1000")
    assert "h100" in str(e.value)
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("sm_91")
    assert "sm_90" in str(e.value)


def test_the_default_without_a_gpu_is_sm_80_with_ptx_and_a_one_line_note():
    if any(d.available for d in CUDA.enumerate()):
        pytest.skip("this machine has a GPU: the default is its arch")
    desc, note = targets.default()
    assert desc.arch == "sm_80" and desc.extra["ptx"] == "compute_80"
    assert "\n" not in note and "sm_80" in note and "PTX" in note


def test_host_without_a_gpu_says_why_and_what_to_use_instead():
    if any(d.available for d in CUDA.enumerate()):
        pytest.skip("this machine has a GPU")
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("host")
    assert "cuda:sm_80" in str(e.value)


def test_host_on_a_gpu_is_the_gpu_s_own_arch(cuda_device):
    desc = targets.parse("host")
    major, minor = cuda_device.compute_capability
    if targets.row_for(major, minor) is None:
        pytest.skip(f"compute capability {major}.{minor} is newer than the table")
    assert desc.extra["compute_capability"] == f"{major}.{minor}"


def test_the_plugin_contributes_the_target_and_the_driver():
    assert "cuda" in manager().by_name("retarget_targets")
    assert "cuda" in manager().by_name("retarget_drivers")
    _, desc, note = resolve_target("cuda:h100")
    assert desc.arch == "sm_90a" and note is None


def test_wmma_fragment_shapes_follow_the_architecture():
    def shapes(arch):
        return [(f["m"], f["n"], f["k"], f["a"], f["acc"]) for f in targets.parse(arch).extra["fragments"]]

    assert shapes("sm_61") == []
    assert shapes("sm_70") == shapes("sm_75") == [(16, 16, 16, "f16", "f32")]
    for arch in ("sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"):
        assert shapes(arch) == [(16, 16, 16, "f16", "f32"), (16, 16, 16, "bf16", "f32")], arch


def test_a_product_carries_its_multiprocessor_count_and_an_architecture_does_not():
    from retarget_cuda.targets import BY_NAME, PRODUCT_MULTIPROCESSORS

    assert set(PRODUCT_MULTIPROCESSORS) <= {a for row in BY_NAME.values() for a in row.aliases}
    assert targets.parse("h100").extra["multiprocessors"] == 132
    assert targets.parse("RTX 4090").extra["multiprocessors"] == 128
    assert "multiprocessors" not in targets.parse("sm_90a").extra
    assert "multiprocessors" not in targets.parse("hopper").extra


def test_every_row_spells_the_wmma_loops_as_measured_for_nvrtc():
    for arch in ("sm_75", "ampere", "h100"):
        extra = targets.parse(arch).extra
        assert extra["peel_last_step"] == ["fragments"] and extra["fragment_k_loop"] == "serial"
