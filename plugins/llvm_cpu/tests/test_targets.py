
import llvmlite.binding as llvm
import pytest
from retarget.compiler import resolve_target
from retarget.errors import UnknownTargetError
from retarget.plugin_manager import manager
from retarget_llvm_cpu import FORMAT, targets


def test_every_spelling_resolves_to_a_fully_described_row():
    for spelling in targets.names():
        desc = targets.parse(spelling)
        assert desc.backend == "llvm-cpu" and desc.format == FORMAT
        assert desc.arch and desc.features
        assert desc.extra["triple"].split("-")[0] in ("x86_64", "aarch64", "arm64")
        assert desc.extra["cpu"]
        assert desc.extra["vector_bits"] in (128, 256, 512)


def test_spellings_are_case_insensitive_and_aliases_reach_their_row():
    assert targets.parse("Zen4").arch == "znver4"
    assert targets.parse("graviton3").arch == "neoverse-v1"
    assert targets.parse("x86_64").arch == "x86-64"


def test_each_name_belongs_to_exactly_one_row():
    spellings = [n for row in targets.TABLE for n in (row.name, *row.aliases)]
    assert len(spellings) == len(set(spellings))


def test_every_cpu_and_feature_in_the_table_is_known_to_llvm():
    llvm.initialize_all_targets()
    host_family = llvm.get_process_triple().split("-")[0]
    for row in targets.TABLE:
        desc = targets.describe_row(row)
        target = llvm.Target.from_triple(desc.extra["triple"])
        target.create_target_machine(cpu=row.cpu, features=",".join("+" + f for f in row.features))
        if row.family == host_family:
            known = set(llvm.get_host_cpu_features())
            assert set(row.features) <= known, f"{row.name}: {set(row.features) - known}"


def test_an_unknown_name_raises_with_the_closest_names():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("skylake-avx51")
    assert "skylake-avx512" in str(e.value)


def test_the_default_is_this_machine_with_a_one_line_note():
    desc, note = targets.default()
    assert desc.spec == "host"
    assert desc.extra["cpu"] == llvm.get_host_cpu_name()
    assert "\n" not in note and desc.extra["cpu"] in note


def test_the_plugin_contributes_the_target_and_the_loader():
    assert "llvm-cpu" in manager().by_name("retarget_targets")
    assert FORMAT in manager().by_name("retarget_executable_loaders")
    _, desc, _ = resolve_target("llvm-cpu:x86-64-v3")
    assert desc.arch == "x86-64-v3"
