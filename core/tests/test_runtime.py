import os

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


def test_unsigned_64_bit_inputs_take_their_whole_range():
    np.testing.assert_array_equal(parse_input("2xui64=18446744073709551615 0"), np.array([2**64 - 1, 0], np.uint64))


def _npy(tmp_path, array, **kwargs):
    np.save(tmp_path / "a.npy", array, **kwargs)
    return f"@{tmp_path / 'a.npy'}"


def test_npy_inputs_come_back_c_contiguous_in_native_byte_order(tmp_path):
    fortran = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    got = parse_input(_npy(tmp_path, fortran))
    assert got.flags.c_contiguous and got.flags.writeable
    np.testing.assert_array_equal(got, fortran)
    big_endian = parse_input(_npy(tmp_path, np.arange(3, dtype=">f4")))
    assert big_endian.dtype == np.float32
    np.testing.assert_array_equal(big_endian, [0, 1, 2])


def test_an_npy_scalar_stays_a_scalar(tmp_path):
    got = parse_input(_npy(tmp_path, np.array(3.5, np.float32)))  # ascontiguousarray made it shape (1,)
    assert got.shape == () and got == 3.5


def test_an_npy_header_promising_more_than_the_file_holds_is_refused_before_allocating(tmp_path):
    path = tmp_path / "a.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (2**40, 2**20)})
        f.write(bytes(16))
    with pytest.raises(InputError,
                       match=r"header promises 4,611,686,018,427,387,904 bytes of data and the file holds 16"):
        parse_input(f"@{path}")


@pytest.mark.parametrize("array, message", [
    (np.array([{"a": 1}], dtype=object), "which would need pickle"),
    (np.array(["text"]), "holds <U4, which retarget has no element type for"),
])
def test_npy_files_retarget_cannot_use_are_refused(tmp_path, array, message):
    with pytest.raises(InputError, match=message):
        parse_input(_npy(tmp_path, array, allow_pickle=True))


def test_an_npz_file_is_refused_with_a_hint(tmp_path):
    np.savez(tmp_path / "a.npz", a=np.zeros(2))
    with pytest.raises(InputError, match=r"not a valid .npy file.*not .npz"):
        parse_input(f"@{tmp_path / 'a.npz'}")


def test_input_from_npy_file(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.int64))
    np.testing.assert_array_equal(parse_input(f"@{tmp_path / 'x.npy'}"), np.arange(4))


@pytest.mark.parametrize("text, message", [
    ("2x2xf32", "has no '='"),
    ("2x2xf99=1", "is not SHAPExDTYPE"),
    ("2x2xf32=1 2 3", "3 values for shape"),
    ("@/nonexistent.npy", "cannot read input file"),
    # found by the fuzzer: each was a bare numpy or Python exception
    ("-1x2xf32=0", "a dimension is negative"),
    ("2xui8=255 256", "256 does not fit ui8 \\(0 to 255\\)"),
    ("i64=99999999999999999999", "does not fit i64"),
    ("1099511627776x1099511627776xf32=0", "cannot make a 1099511627776x1099511627776xf32 array"),
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


# -- run-time input checks: before any dispatch, naming the argument ------------------------------------------


@pytest.fixture
def predict(mlp):
    module, x, expected = mlp
    return retarget.load(retarget.compile(module, "vmvx"), device="local-sync").predict, x, expected


def test_a_non_contiguous_array_is_copied_and_gives_the_same_answer(predict):
    fn, x, expected = predict
    wide = np.zeros((2, 16), np.float32)
    wide[:, ::2] = x
    assert not wide[:, ::2].flags.c_contiguous
    np.testing.assert_allclose(fn(wide[:, ::2]), expected, rtol=1e-5)
    np.testing.assert_allclose(fn(np.asfortranarray(x)), expected, rtol=1e-5)


def test_an_array_in_the_other_byte_order_is_accepted(predict):
    fn, x, expected = predict
    np.testing.assert_allclose(fn(x.astype(">f4")), expected, rtol=1e-5)


def test_an_array_on_a_device_is_refused_naming_the_argument(predict):
    class CudaTensor:
        def __dlpack_device__(self):
            return (2, 1)

    with pytest.raises(InputError,
                       match=r"input 0 \('x'\) of predict is an array on cuda:1; this module runs on local"):
        predict[0](CudaTensor())


def test_device_outputs_need_a_driver_that_hands_out_dlpack_arrays(predict):
    fn, x, expected = predict
    with pytest.raises(InputError, match="cannot hand out device arrays"):
        fn(x, output="device")
    with pytest.raises(InputError, match="output must be 'host' or 'device'"):
        fn(x, output="gpu")
    np.testing.assert_allclose(fn(x, output="host"), expected, rtol=1e-6)


def test_a_mode_the_device_does_not_have_is_refused(mlp):
    module, _, _ = mlp
    with pytest.raises(InputError, match="local-sync:0 has no command-buffer mode 'graph'"):
        retarget.load(retarget.compile(module, "vmvx"), device="local-sync", mode="graph")


def test_the_wrong_number_of_inputs_shows_the_signature(predict):
    with pytest.raises(InputError, match=r"predict\(x: tensor<2x8xf32>\) -> \(tensor<2x4xf32>\) takes 1 inputs, got 2"):
        predict[0](predict[1], predict[1])


def test_python_lists_are_converted_when_their_kind_fits(predict):
    fn, x, expected = predict
    np.testing.assert_allclose(fn(x.tolist()), expected, rtol=1e-5)
    np.testing.assert_allclose(fn(np.zeros((2, 8), int).tolist()), fn(np.zeros((2, 8), np.float32)))
    with pytest.raises(InputError, match=r"input 0 \('x'\) of predict must be float32 numbers, got list of <U1"):
        fn([["a"] * 8] * 2)


def test_a_list_of_floats_for_an_integer_input_is_refused():
    from retarget.testing.graphs import add_module

    module, (x, y), expected = add_module(n=4, dtype="i32")
    add = retarget.load(retarget.compile(module, "vmvx"), device="local-sync").main
    np.testing.assert_array_equal(add(x.tolist(), y.tolist()), expected)
    with pytest.raises(InputError, match=r"input 1 \('y'\) of main must be int32 numbers, got list of float64"):
        add(x, [0.5] * 4)


def test_scalar_inputs_take_0d_arrays_and_numbers():
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes

    arg = Value(TensorType((), dtypes.f32))
    fn = Function("double", [arg], arg_names=["s"])
    fn.returns = [Builder(fn).op("rt.add", [arg, arg])]
    double = retarget.load(retarget.compile(Module({"double": fn}), "vmvx"), device="local-sync").double
    for s in (np.float32(1.5), np.array(1.5, np.float32), 1.5):
        assert double(s) == np.float32(3.0) and double(s).shape == ()
    with pytest.raises(InputError, match=r"must have shape \[\], got \[1\]"):
        double(np.array([1.5], np.float32))


def test_nan_inputs_run_and_propagate_as_numpy_does(mlp):
    module, x, _ = mlp
    w, b, _ = [op.attrs["value"].array for op in module.functions["predict"].ops if op.name == "rt.constant"]
    x = x.copy()
    x[0, 0] = np.nan
    y = retarget.load(retarget.compile(module, "vmvx"), device="local-sync").predict(x)
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-5, equal_nan=True)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


# -- threads and memory ---------------------------------------------------------------------------------------


def test_threads_calling_one_module_at_once_get_their_own_answers():
    """8 threads start together at a barrier; each calls the same function and another function of the module
    with its own inputs, over and over, on local-task."""
    import threading

    from retarget.ir import Module
    from retarget.testing.graphs import add_module, chain_module

    add_m, _, _ = add_module(n=64)
    chain_m, _, _ = chain_module()
    two = Module({"add": add_m.functions["main"], "chain": chain_m.functions["main"]})
    two.functions["add"].name, two.functions["chain"].name = "add", "chain"
    loaded = retarget.load(retarget.compile(two, "vmvx"), device="local-task")
    threads, rounds = 8, 25
    start = threading.Barrier(threads)
    failures = []

    def work(k):
        rng = np.random.default_rng(k)
        start.wait()
        for _ in range(rounds):
            x, y = rng.standard_normal((2, 64)).astype(np.float32)
            a, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 16), (16, 8), (8, 4)))
            try:
                np.testing.assert_allclose(loaded.add(x, y), x + y, rtol=1e-6)
                np.testing.assert_allclose(loaded.chain(a, w1, w2), a @ w1 @ w2, rtol=1e-4, atol=1e-5)
            except Exception as e:  # reported from the main thread
                failures.append(f"thread {k}: {e}")
                return

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not failures, failures[:3]
    assert not any(t.is_alive() for t in pool)


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def test_two_thousand_calls_leak_no_memory(predict):
    import gc
    import tracemalloc

    fn, x, expected = predict
    for _ in range(200):  # warm up: caches, allocator pools
        fn(x)
    gc.collect()
    rss = _rss_bytes()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            y = fn(x)
        del y
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 << 10, f"Python-visible memory grew by {grown:,} bytes over 2000 calls"
    if rss is not None:
        assert _rss_bytes() - rss < 16 << 20, f"RSS grew by {_rss_bytes() - rss:,} bytes over 2000 calls"


def _vmvx_code_with_two_workgroups(backend: str):
    from dataclasses import replace

    from retarget.testing.conformance import kit
    from retarget.testing.graphs import add_module
    from retarget.vmvx import REFERENCE, VmvxTarget

    module, _, _ = add_module(n=8)
    binary = VmvxTarget().compile([d.function for d in kit.dispatches(kit.prepare(module))],
                                  replace(REFERENCE, backend=backend))
    binary.entry_points = [replace(e, workgroup_count=(2, 1, 1)) for e in binary.entry_points]
    return binary


def test_vmvx_code_that_another_target_got_wrong_blames_that_target_not_the_module():
    from retarget.errors import ModuleFormatError
    from retarget.vmvx import VmvxLoader

    with pytest.raises(ModuleFormatError, match="asks for \\[2, 1, 1\\] workgroups") as error:
        VmvxLoader().load(_vmvx_code_with_two_workgroups("acme"))
    assert "target 'acme' produced this vmvx-graph code" in error.value.hint and "corrupt" not in error.value.hint


def test_vmvx_code_of_vmvx_itself_that_is_wrong_is_a_corrupt_module():
    from retarget.errors import ModuleFormatError
    from retarget.vmvx import VmvxLoader

    with pytest.raises(ModuleFormatError) as error:
        VmvxLoader().load(_vmvx_code_with_two_workgroups("vmvx"))
    assert error.value.hint == "the module is corrupt; recompile it"


@pytest.mark.parametrize("enabled", [True, False])
def test_compile_pauses_the_garbage_collector_and_restores_it(mlp, monkeypatch, enabled):
    import gc

    from retarget import compiler

    seen = []
    monkeypatch.setattr(compiler, "GRAPH_PASSES", [("watch", lambda m: seen.append(gc.isenabled()) or m)])
    (gc.enable if enabled else gc.disable)()
    try:
        retarget.compile(mlp[0], "vmvx")
        assert seen == [False] and gc.isenabled() is enabled
        with pytest.raises(UnknownTargetError):
            retarget.compile(mlp[0], "no-such-target")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
