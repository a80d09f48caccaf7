import numpy as np
import pytest
import retarget
from retarget.errors import InputError, UnknownDeviceError, UnknownTargetError
from retarget.runtime import parse_device, parse_input


@pytest.mark.parametrize("device", ["local-sync", "local-task", "auto"])
def test_compiled_mlp_matches_numpy_on_each_local_driver(mlp, device):
    module, x, expected = mlp
    loaded = retarget.load(retarget.compile(module, "vmvx"), device=device)
    np.testing.assert_allclose(loaded.predict(x), expected, rtol=1e-5)


def test_repeated_calls_reuse_the_recorded_command_buffer(mlp):
    module, x, expected = mlp
    fn = retarget.load(retarget.compile(module, "vmvx"), device="local-task").predict
    recorded = fn.command_buffer
    for _ in range(3):
        np.testing.assert_allclose(fn(x), expected, rtol=1e-5)
    assert fn.command_buffer is recorded


def test_wrong_input_shape_names_the_argument(mlp):
    module, x, _ = mlp
    loaded = retarget.load(retarget.compile(module, "vmvx"), device="local-sync")
    with pytest.raises(InputError, match=r"input 0 \('x'\) of predict must have shape \[2, 8\], got \[3, 8\]"):
        loaded.predict(np.zeros((3, 8), np.float32))


def test_wrong_input_dtype_says_how_to_convert(mlp):
    module, x, _ = mlp
    loaded = retarget.load(retarget.compile(module, "vmvx"), device="local-sync")
    with pytest.raises(InputError, match=r"must be f32 .* got float64 \(convert it"):
        loaded.predict(x.astype(np.float64))


def test_unknown_target_suggests_close_names(mlp):
    with pytest.raises(UnknownTargetError, match="did you mean vmvx"):
        retarget.compile(mlp[0], "vmvxx")


def test_unknown_device_suggests_close_drivers(mlp):
    with pytest.raises(UnknownDeviceError, match="did you mean local-task"):
        retarget.load(retarget.compile(mlp[0], "vmvx"), device="local-tsk")


def test_device_specs_accept_iree_spelling():
    assert parse_device("cuda://1") == ("cuda", "1")
    assert parse_device("cuda:1") == ("cuda", "1")
    assert parse_device("local-task") == ("local-task", "")


@pytest.mark.parametrize("text, expected", [
    ("2x2xf32=1 2 3 4", np.array([[1, 2], [3, 4]], np.float32)),
    ("1x3xi32=7", np.full((1, 3), 7, np.int32)),
    ("f32=1.5", np.array(1.5, np.float32)),
    ("2xi1=1 0", np.array([True, False])),
])
def test_iree_input_syntax(text, expected):
    got = parse_input(text)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_input_from_npy_file(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.int64))
    np.testing.assert_array_equal(parse_input(f"@{tmp_path / 'x.npy'}"), np.arange(4))


@pytest.mark.parametrize("text, message", [
    ("2x2xf32", "has no '='"),
    ("2x2xf99=1", "is not SHAPExDTYPE"),
    ("2x2xf32=1 2 3", "3 values for shape"),
    ("@/nonexistent.npy", "cannot read input file"),
])
def test_bad_inputs_get_clear_errors(text, message):
    with pytest.raises(InputError, match=message):
        parse_input(text)


def test_independent_dispatches_share_a_stage():
    """Two ops that read only the input need no barrier between them."""
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes

    arg = Value(TensorType((4,), dtypes.f32))
    fn = Function("f", [arg])
    b = Builder(fn)
    fn.returns = [b.op("rt.exp", [arg]), b.op("rt.neg", [arg])]
    art = retarget.compile(Module({"f": fn}), "vmvx")
    program = art.functions["f"]["program"]
    assert [c["op"] for c in program] == ["dispatch", "dispatch"]
    x = np.arange(4, dtype=np.float32)
    e, n = retarget.load(art, device="local-task").f(x)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(n, -x)


def test_memory_plan_reuses_dead_buffers():
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes

    arg = Value(TensorType((1024,), dtypes.f32))
    fn = Function("chain", [arg])
    b = Builder(fn)
    v = arg
    for _ in range(8):
        v = b.op("rt.exp", [b.op("rt.neg", [v])])
    fn.returns = [v]
    art = retarget.compile(Module({"chain": fn}), "vmvx")
    assert art.functions["chain"]["arena_bytes"] <= 3 * 4096  # 17 values, at most 2 live (+1 input)
    x = np.linspace(0, 1, 1024, dtype=np.float32)
    ref = x
    for _ in range(8):
        ref = np.exp(-ref)
    np.testing.assert_allclose(retarget.load(art, "local-task").chain(x), ref, rtol=1e-6)


def test_public_functions_are_not_shadowed_by_submodules():
    """`retarget.targets()` and friends stay callable whatever the process has imported."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(retarget.__path__, "retarget."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    for name in ("compile", "load", "targets", "drivers", "devices", "plugins"):
        assert callable(getattr(retarget, name)), name


def test_native_code_is_preferred_over_the_reference_when_both_fit(mlp):
    module, x, expected = mlp
    if "llvm-cpu" not in retarget.targets():
        pytest.skip("the llvm-cpu plugin is not installed (pip install -e plugins/llvm_cpu)")
    loaded = retarget.load(retarget.compile(module, ["vmvx", "llvm-cpu"]), device="local-task")
    assert loaded.variant.target.backend == "llvm-cpu"
    np.testing.assert_allclose(loaded.predict(x), expected, rtol=1e-5)
