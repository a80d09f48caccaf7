"""The command line as a user meets it: exit codes, one-line errors, JSON for scripts."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest


def cli(*args, cwd=None, env_columns=None):
    env = {**os.environ, "COLUMNS": str(env_columns)} if env_columns else None
    return subprocess.run([sys.executable, "-m", "retarget", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env)


def assert_clean_error(result, *phrases):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_run_prints_results_and_saves_them(mlp_rtm, tmp_path):
    path, x, expected = mlp_rtm
    out = tmp_path / "y.npy"
    result = cli("run", path, "--device", "local-task", "--function", "predict", "--input", f"@{tmp_path / 'x.npy'}",
                 "--output", out)
    assert result.returncode == 0, result.stderr
    assert "result[0]: tensor<2x4xf32>" in result.stdout
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-5)


def test_run_json_gives_values(mlp_rtm, tmp_path):
    path, x, expected = mlp_rtm
    result = cli("run", path, "--device", "local-sync", "--input", f"@{tmp_path / 'x.npy'}", "--json")
    data = json.loads(result.stdout)
    assert data["device"] == "local-sync:0"
    np.testing.assert_allclose(np.array(data["results"][0]["values"], np.float32), expected, rtol=1e-5)


def test_list_functions_shows_signatures(mlp_rtm):
    result = cli("run", mlp_rtm[0], "--list-functions")
    assert "predict(x: tensor<2x8xf32>) -> (tensor<2x4xf32>)" in result.stdout


def test_malformed_mlir_is_one_line_with_location(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = \"rt.exp\"(%a : tensor<2xf32>\n}\n")
    assert_clean_error(cli("compile", bad, "--target", "vmvx", "-o", tmp_path / "o.rtm"), f"{bad}:2:")


def test_unknown_target_is_one_line_with_suggestions(tmp_path, mlp_rtm):
    src = tmp_path / "m.mlir"
    src.write_text("func.func @f(%a: tensor<2xf32>) -> (tensor<2xf32>) {\n  return %a : tensor<2xf32>\n}\n")
    assert_clean_error(cli("compile", src, "--target", "vmxv", "-o", tmp_path / "o.rtm"), "unknown target 'vmxv'",
                       "did you mean vmvx")


def test_unknown_device_is_one_line(mlp_rtm):
    assert_clean_error(cli("run", mlp_rtm[0], "--device", "cudaa"), "unknown device 'cudaa'")


def test_truncated_module_is_one_line(mlp_rtm, tmp_path):
    cut = tmp_path / "cut.rtm"
    data = mlp_rtm[0].read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    assert_clean_error(cli("run", cut, "--device", "local-sync"), "truncated")


def test_wrong_input_shape_is_one_line(mlp_rtm):
    assert_clean_error(cli("run", mlp_rtm[0], "--device", "local-sync", "--input", "3x8xf32=0"),
                       "must have shape [2, 8], got [3, 8]")


def test_wrong_input_dtype_is_one_line(mlp_rtm):
    assert_clean_error(cli("run", mlp_rtm[0], "--device", "local-sync", "--input", "2x8xi32=0"), "must be f32")


def test_verbose_shows_the_traceback(mlp_rtm):
    result = cli("--verbose", "run", mlp_rtm[0], "--device", "nope")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_a_bug_is_one_line_that_says_so(monkeypatch, capsys):
    import retarget.cli as cli_module

    def broken():
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(cli_module, "run_app", broken)
    with pytest.raises(SystemExit) as exited:
        cli_module.main()
    err = capsys.readouterr().err
    assert exited.value.code == 70 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "internal error: OverflowError: cannot convert float infinity" in err and "--verbose" in err


@pytest.mark.parametrize("command", ["plugins", "targets", "drivers", "devices"])
def test_listings_have_json(command):
    result = cli(command, "--json")
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list)


def test_devices_dump_shows_properties():
    data = json.loads(cli("devices", "--dump", "--json").stdout)
    local = next(d for d in data if d["device"] == "local-task:0")
    assert "vmvx-graph" in local["dump"]["executable_formats"]


def test_devices_lists_only_the_drivers_and_devices_named():
    data = json.loads(cli("devices", "local-sync:0", "local-task", "--dump", "--json").stdout)
    assert [d["device"] for d in data] == ["local-task:0", "local-sync:0"] and all("dump" in d for d in data)
    assert_clean_error(cli("devices", "local-tsak"), "no driver 'local-tsak'", "did you mean local-task")
    assert_clean_error(cli("devices", "local-task:7"), "no device local-task:7")


def test_the_devices_table_shows_long_properties_in_brief():
    from retarget.cli import _brief

    assert _brief([8, 8]) == "[8, 8]" and _brief("x" * 100) == "x" * 100
    assert _brief([f"VK_KHR_extension_{i}" for i in range(101)]) == "(101, see --dump)"


def test_an_error_line_prints_brackets_and_colon_words_as_written(tmp_path):
    missing = tmp_path / "m[bold]:apple:.mlir"
    assert_clean_error(cli("compile", missing, "--target", "vmvx"), f"{missing}: no such file")


def test_device_reasons_print_brackets_and_colon_words_as_written(monkeypatch):
    import retarget
    from retarget.cli import app
    from retarget.protocols import DeviceInfo
    from typer.testing import CliRunner

    reason = "[b]x[/b]:apple:"
    monkeypatch.setattr(retarget, "devices", lambda: [DeviceInfo("local-task", "9", "cpu", available=False,
                                                                 reason=reason)])
    for command in ("devices", "drivers"):
        result = CliRunner().invoke(app, [command])
        assert result.exit_code == 0 and reason in result.stdout, result.stdout


def test_doctor_passes_its_smoke_test():
    result = cli("doctor", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["ok"]
    assert {(s["target"], s["device"]) for s in report["smoke"] if s["pass"]} >= {("vmvx", "local-task:0")}
    assert report["lines"][0] == "plugins" and not any("[/]" in line for line in report["lines"])  # plain text


def test_compile_dumps_every_stage(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(
        "func.func @f(%a: tensor<2xf32>) -> (tensor<2xf32>) {\n"
        '  %0 = "rt.exp"(%a) : (tensor<2xf32>) -> tensor<2xf32>\n'
        "  return %0 : tensor<2xf32>\n}\n")
    result = cli("compile", src, "--target", "vmvx", "-o", tmp_path / "m.rtm", "--dump-after-all", tmp_path / "dump")
    assert result.returncode == 0, result.stderr
    stages = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert stages[0] == "01-import.mlir" and any("dispatches" in s for s in stages)
    assert any("host-program" in s for s in stages) and any("executable-vmvx" in s for s in stages)


def test_check_reports_each_function_and_fails_on_a_wrong_expectation(tmp_path):
    src = tmp_path / "checks.mlir"
    src.write_text(
        "func.func @doubles() {\n"
        "  %a = util.unfoldable_constant dense<[1.0, 2.0]> : tensor<2xf32>\n"
        "  %b = arith.addf %a, %a : tensor<2xf32>\n"
        "  check.expect_almost_eq_const(%b, dense<[2.0, 4.0]> : tensor<2xf32>) : tensor<2xf32>\n"
        "  return\n}\n"
        "func.func @wrong() {\n"
        "  %a = util.unfoldable_constant dense<[1, 2]> : tensor<2xi32>\n"
        "  check.expect_eq_const(%a, dense<[1, 3]> : tensor<2xi32>) : tensor<2xi32>\n"
        "  return\n}\n")
    result = cli("check", src, "--target", "vmvx", "--device", "local-sync", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert [(f["function"], f["status"]) for f in report["functions"]] == [("doubles", "pass"), ("wrong", "fail")]
    assert f"{src}:9:3: expect_eq failed" in report["functions"][1]["messages"][0]


# -- --fallback, --refuse, --explain and devices per placement -------------------------------------------


@pytest.fixture(scope="module")
def mlp_mlir(tmp_path_factory):
    from retarget.ir import print_module
    from retarget.testing import graphs

    folder = tmp_path_factory.mktemp("split")
    module, x, expected = graphs.mlp_module()
    (folder / "mlp.mlir").write_text(print_module(module))
    np.save(folder / "x.npy", x)
    return folder, expected


def test_compile_without_a_fallback_names_the_refused_op_and_suggests_one(mlp_mlir):
    folder, _ = mlp_mlir
    result = cli("compile", folder / "mlp.mlir", "--target", "vmvx", "--refuse", "rt.max", "-o", folder / "no.rtm")
    assert_clean_error(result, "rt.max", "refused by --refuse", "--fallback llvm-cpu")


def test_compile_explain_prints_each_op_with_its_placement_and_reason(mlp_mlir):
    folder, _ = mlp_mlir
    result = cli("compile", folder / "mlp.mlir", "--target", "vmvx", "--refuse", "rt.max", "--fallback", "vmvx",
                 "-o", folder / "split.rtm", "--explain")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("rt.matmul" in line and " cpu " in line and "supported" in line for line in lines), result.stdout
    assert any("rt.max" in line and "cpu-fallback" in line and "refused by --refuse" in line for line in lines)
    assert "schedule: cpu (1 dispatch) -> cpu->cpu-fallback 32 B -> cpu-fallback (1 dispatch)" in result.stdout


def test_compile_explain_json_holds_the_placement_report(mlp_mlir):
    folder, _ = mlp_mlir
    result = cli("compile", folder / "mlp.mlir", "--target", "vmvx", "--refuse", "rt.max", "--fallback", "vmvx",
                 "-o", folder / "split.rtm", "--explain", "--json")
    data = json.loads(result.stdout)
    assert data["placements"] == {"cpu": ["vmvx:reference"], "cpu-fallback": ["vmvx:reference"]}
    ops = data["placement"]["functions"]["predict"]["ops"]
    assert [(o["op"], o["placement"]) for o in ops] == [("rt.matmul", "cpu"), ("rt.add", "cpu"),
                                                         ("rt.max", "cpu-fallback")]
    assert data["transfers"] == 1


def test_run_takes_a_device_per_placement_and_lists_where_functions_run(mlp_mlir):
    folder, expected = mlp_mlir
    cli("compile", folder / "mlp.mlir", "--target", "vmvx", "--refuse", "rt.max", "--fallback", "vmvx",
        "-o", folder / "split.rtm")
    result = cli("run", folder / "split.rtm", "--device", "cpu=local-sync", "--device", "cpu-fallback=local-task",
                 "--input", f"@{folder / 'x.npy'}", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["device"] == "cpu=local-sync:0 cpu-fallback=local-task:0"
    np.testing.assert_allclose(np.array(data["results"][0]["values"], np.float32), expected, rtol=1e-5)
    listing = cli("run", folder / "split.rtm", "--list-functions")
    assert "runs: cpu (1 dispatch) -> cpu->cpu-fallback 32 B -> cpu-fallback (1 dispatch)" in listing.stdout


def test_two_devices_without_placements_is_a_clean_error(mlp_rtm):
    assert_clean_error(cli("run", mlp_rtm[0], "--device", "local-sync", "--device", "local-task"),
                       "--device given 2 times", "--device gpu=vulkan")


def test_compile_help_lists_every_quantization_scheme():
    from retarget.passes.quantize import SCHEMES

    result = cli("compile", "--help")
    text = " ".join(result.stdout.replace("│", " ").split())
    assert all(name in text for name in SCHEMES) and "--precision" in text and "--interface-precision" in text


def test_compile_quantizes_and_reports_constant_bytes(tmp_path):
    import retarget
    from retarget.testing import quant_model

    module, x, w, b = quant_model.linear_layer(2, 64, 32)
    source = tmp_path / "linear.mlir"
    from retarget import ir

    source.write_text(ir.print_module(module))
    plain = json.loads(cli("compile", source, "-o", tmp_path / "a.rtm", "--json").stdout)
    result = cli("compile", source, "-o", tmp_path / "q.rtm", "--quantize", "int4-g32", "--precision", "f16", "--json")
    assert result.returncode == 0, result.stderr
    assert "int4-g32: 1 linear layers" in result.stderr
    assert json.loads(result.stdout)["constant_bytes"] < plain["constant_bytes"] / 5
    y = retarget.load(tmp_path / "q.rtm", device="local-sync").main(x)
    assert y.dtype == np.float32 and np.abs(y - (quant_model.linear(x, w, "int4-g32") + b)).max() < 0.05


def test_compile_with_an_unknown_precision_is_a_one_line_error(tmp_path):
    source = tmp_path / "m.mlir"
    from retarget import ir
    from retarget.testing import quant_model

    source.write_text(ir.print_module(quant_model.linear_layer(1, 8, 8)[0]))
    assert_clean_error(cli("compile", source, "-t", "vmvx", "--precision", "half", "-o", tmp_path / "x.rtm"),
                       "unknown precision 'half'", "f16")


def test_version_needs_no_command():
    from retarget import __version__

    result = cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"retarget {__version__}", result.stderr


def test_an_output_in_a_missing_folder_is_refused_before_the_work(mlp_mlir, mlp_rtm, tmp_path):
    folder, _ = mlp_mlir
    missing = tmp_path / "no" / "such"
    assert_clean_error(cli("compile", folder / "mlp.mlir", "--target", "vmvx", "-o", missing / "m.rtm"),
                       f"--output {missing / 'm.rtm'}", "does not exist")
    assert_clean_error(cli("run", mlp_rtm[0], "--input", f"@{tmp_path / 'x.npy'}", "--output", missing / "y.npy"),
                       f"--output {missing / 'y.npy'}", "does not exist")


def test_too_few_or_many_inputs_say_how_to_spell_each(mlp_rtm, tmp_path):
    hint = "give one --input per argument, e.g. --input 2x8xf32=0"
    assert_clean_error(cli("run", mlp_rtm[0]), "predict takes 1 input, got 0", hint)
    x = f"@{tmp_path / 'x.npy'}"
    assert_clean_error(cli("run", mlp_rtm[0], "--input", x, "--input", x), "got 2 --input", hint)


def test_the_compile_summary_is_one_line_when_piped(mlp_mlir):
    folder, _ = mlp_mlir
    result = cli("compile", folder / "mlp.mlir", "--target", "vmvx", "-o", folder / "a-long-module-name.rtm")
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith("wrote ") and "functions predict) in " in line


@pytest.mark.parametrize("command", ["compile", "run"])
def test_help_shows_examples(command):
    text = cli(command, "--help").stdout
    assert "For example:" in text and f"retarget {command} model." in text


@pytest.mark.parametrize("command", ["compile", "run", "benchmark"])
def test_help_names_option_values_for_a_person_not_by_python_type(command):
    text = cli(command, "--help", env_columns=200).stdout
    options = [line for line in text.splitlines() if line.startswith("│ --")]
    assert any("--help" in line for line in options)
    assert options and not any("<list[" in line or "<bool>" in line for line in options), options
    assert "DRIVER[:ID]" in text if command != "compile" else "BACKEND[:ARCH]" in text


def test_benchmark_png_goes_with_the_suite(mlp_rtm, tmp_path):
    assert_clean_error(cli("benchmark", mlp_rtm[0], "--png", tmp_path / "b.png"), "--png goes with --suite")


def test_a_dynamic_function_compiles_and_lists_on_one_line_each_when_piped(tmp_path):
    source = tmp_path / "exp.mlir"
    source.write_text("func.func @exponential_of_each_element(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {\n"
                      "  %0 = math.exp %a : tensor<?x8xf32>\n  return %0 : tensor<?x8xf32>\n}\n")
    compiled = cli("compile", source, "--target", "vmvx", "-o", tmp_path / "exp.rtm")
    assert compiled.returncode == 0, compiled.stderr
    assert "; 1 dispatch; functions exponential_of_each_element) in " in compiled.stdout
    listing = cli("run", tmp_path / "exp.rtm", "--list-functions").stdout.splitlines()
    assert listing == ["exponential_of_each_element(arg0: tensor<arg0_dim0x8xf32>) -> (tensor<arg0_dim0x8xf32>) "
                       "with arg0_dim0=1.."]


def test_cache_lists_each_backends_entries_and_clears_them(mlp_mlir, tmp_path):
    folder, _ = mlp_mlir
    env = {**os.environ, "RETARGET_CACHE_DIR": str(tmp_path / "cache")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "retarget", *map(str, args)], capture_output=True, text=True,
                              env=env)

    assert "is empty" in run("cache").stdout
    compiled = run("compile", folder / "mlp.mlir", "--target", "llvm-cpu:x86-64-v3", "-o", tmp_path / "m.rtm")
    assert compiled.returncode == 0, compiled.stderr
    [row] = json.loads(run("cache", "--json").stdout)["backends"]
    assert row["backend"] == "llvm-cpu" and row["entries"] == 1 and row["bytes"] > 0
    assert_clean_error(run("cache", "--backend", "llvm-cp"), "--backend llvm-cp", "did you mean llvm-cpu?")
    cleared = json.loads(run("cache", "--clear", "--json").stdout)
    assert cleared["cleared_bytes"] == row["bytes"] and not list((tmp_path / "cache").rglob("*.o"))
    assert "is off" in subprocess.run([sys.executable, "-m", "retarget", "cache"], capture_output=True, text=True,
                                      env={**env, "RETARGET_CACHE_DIR": "off"}).stdout
