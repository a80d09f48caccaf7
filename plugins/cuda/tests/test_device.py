"""The cuda driver on a GPU: memory, launches, the three command-buffer modes, DLPack, and whole models.
Every test here skips with "no CUDA device: <reason>" where there is no GPU."""

import numpy as np
import pytest
import retarget
from retarget.ir import dtypes
from retarget.protocols import Binding, EntryPoint, TensorType
from retarget.testing.graphs import mlp_module
from retarget_cuda import targets
from retarget_cuda.compile import compile_entries

N = 1000
ADD = r'''
extern "C" __global__ void add(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1000) out[i] = a[i] + b[i];
}
'''
ADD_ENTRY = EntryPoint("add", tuple(Binding(TensorType((N,), dtypes.f32), a) for a in ("read", "read", "write")),
                       (256, 1, 1), (4, 1, 1))
rng = np.random.default_rng(0)


def _host_arch(device):
    major, minor = device.compute_capability
    return targets._desc_for_device(f"{major}.{minor}", "host")


def test_written_bytes_read_back_at_any_offset(cuda_device):
    buf = cuda_device.allocate(4096)
    data = rng.standard_normal(100).astype(np.float32)
    cuda_device.write(buf, 256, data)
    np.testing.assert_array_equal(cuda_device.read(buf, 256, 400).view(np.float32), data)


def test_fill_and_copy_run_in_recorded_order(cuda_device):
    a, b = cuda_device.allocate(64), cuda_device.allocate(64)
    cb = cuda_device.command_buffer()
    cb.fill(a, 0, 64, 7)
    cb.barrier()
    cb.copy(a, 0, b, 16, 32)
    cb.end()
    cuda_device.write(b, 0, np.zeros(64, np.uint8))
    cuda_device.submit(cb)
    cuda_device.wait()
    assert list(cuda_device.read(b, 0, 64)) == [0] * 16 + [7] * 32 + [0] * 16


MODES = ("graph", "stream", "direct")


def _add_program(device, mode: str):
    exe = device.load_executable(compile_entries(ADD, [ADD_ENTRY], _host_arch(device)))
    buf = device.allocate(3 * N * 4 + 128)
    cb = device.command_buffer(mode=mode)
    cb.dispatch(exe, 0, [(buf, 0, N * 4), (buf, N * 4, N * 4), (buf, 2 * N * 4 + 128, N * 4)])
    cb.end()
    return exe, buf, cb


@pytest.mark.parametrize("mode", MODES)
def test_a_launch_computes_with_bindings_at_offsets(cuda_device, mode):
    exe, buf, cb = _add_program(cuda_device, mode)
    assert exe.loaded_as == "cubin"
    for _ in range(3):  # a graph is captured on the first submit and replayed after
        a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
        cuda_device.write(buf, 0, a)
        cuda_device.write(buf, N * 4, b)
        cuda_device.submit(cb)
        cuda_device.wait()
        np.testing.assert_allclose(cuda_device.read(buf, 2 * N * 4 + 128, N * 4).view(np.float32), a + b)
    assert (cb.graph_exec is not None) == (mode == "graph")


@pytest.mark.parametrize("mode", MODES)
def test_timed_submit_runs_the_work_and_returns_the_gpu_time_in_seconds(cuda_device, mode):
    _, buf, cb = _add_program(cuda_device, mode)
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    cuda_device.write(buf, 0, a)
    cuda_device.write(buf, N * 4, b)
    seconds = cuda_device.timed_submit(cb)
    assert isinstance(seconds, float) and seconds > 0  # an event pair, not a speed claim
    np.testing.assert_allclose(cuda_device.read(buf, 2 * N * 4 + 128, N * 4).view(np.float32), a + b)


def test_ptx_of_an_older_arch_is_jit_compiled_when_no_cubin_fits(cuda_device):
    major, _ = cuda_device.compute_capability
    older = [r for r in targets.TABLE if r.compute_capability[0] < major and not r.arch_specific
             and r.compute_capability >= (7, 5)]
    if not older:
        pytest.skip("no older arch that this NVRTC compiles for")
    binary = compile_entries(ADD, [ADD_ENTRY], targets.describe_row(older[-1]))
    assert cuda_device.load_executable(binary).loaded_as == "ptx"


def test_arch_specific_code_of_another_gpu_is_refused_with_the_fix(cuda_device):
    other = "sm_100a" if cuda_device.compute_capability != (10, 0) else "sm_90a"
    reason = cuda_device.can_load("cuda-cubin", targets.parse(other))
    assert other in reason and "--target cuda:host" in reason


@pytest.mark.parametrize("mode", MODES)
def test_the_mlp_runs_on_cuda_in_each_mode_and_matches_numpy(cuda_device, mode):
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda", mode=mode)
    assert m.mode == mode
    for _ in range(2):
        np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_the_default_mode_is_graph_and_the_environment_can_pick_another(cuda_device, monkeypatch):
    from retarget_cuda.driver import _default_mode

    assert cuda_device.modes[0] == "graph" and set(cuda_device.modes) == set(MODES)
    monkeypatch.setenv("RETARGET_CUDA_MODE", "direct")
    assert _default_mode() == "direct"
    monkeypatch.delenv("RETARGET_CUDA_MODE")
    monkeypatch.setenv("RETARGET_CUDA_GRAPHS", "0")  # the older spelling
    assert _default_mode() == "stream"


def test_an_unknown_mode_is_refused_naming_the_modes(cuda_device):
    module, _, _ = mlp_module()
    with pytest.raises(retarget.errors.InputError, match="graph, stream, direct"):
        retarget.load(retarget.compile(module, "cuda:host"), device="cuda", mode="fast")


def test_every_mode_gives_the_same_bits(cuda_device):
    module, x, _ = mlp_module(batch=8, features=64, hidden=32)
    art = retarget.compile(module, "cuda:host")
    xs = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(3)]
    results = {mode: [retarget.load(art, device="cuda", mode=mode).predict(v) for v in xs] for mode in MODES}
    for mode in MODES[1:]:
        for got, want in zip(results[mode], results["graph"]):
            np.testing.assert_array_equal(got, want)


# -- DLPack ------------------------------------------------------------------------------------------------


@pytest.fixture()
def torch_cuda(cuda_device):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA (a CPU build): DLPack with a GPU tensor needs torch with CUDA")
    return torch


def test_torch_cuda_tensors_go_in_and_device_arrays_come_out(torch_cuda):
    torch = torch_cuda
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    y = m.predict(torch.from_numpy(x).cuda())
    assert isinstance(y, retarget.DeviceArray) and y.shape == expected.shape
    t = torch.from_dlpack(y)  # no copy: the tensor is our memory
    assert t.is_cuda and t.data_ptr() == m.device.address(y.buffer)
    np.testing.assert_allclose(t.cpu().numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-5)


def test_each_call_returns_new_device_arrays_that_later_calls_leave_alone(torch_cuda):
    torch = torch_cuda
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    first = torch.from_dlpack(m.predict(torch.from_numpy(x).cuda()))
    m.predict(torch.zeros(x.shape, device="cuda"))
    np.testing.assert_allclose(first.cpu().numpy(), expected, rtol=1e-5, atol=1e-5)


def test_work_queued_on_torch_s_stream_is_finished_before_the_call_reads_it(torch_cuda):
    torch = torch_cuda
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        busy = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):  # keep the stream busy, then write the input last
            product = busy @ busy
        xin = torch.from_numpy(x).cuda(non_blocking=True) + torch.tanh(product[:1, :1]) * 0
    with torch.cuda.stream(side):
        y = m.predict(xin, output="host")
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_a_dropped_output_s_memory_is_reused_by_the_next_call_once_all_work_is_done(torch_cuda):
    torch = torch_cuda
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    first = torch.from_dlpack(m.predict(x, output="device"))  # handed out through DLPack, then let go
    address = first.data_ptr()
    del first
    second = m.predict(x, output="device")
    assert second.buffer.address == address
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_an_output_torch_still_reads_on_another_stream_is_not_overwritten(torch_cuda):
    torch = torch_cuda
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    side = torch.cuda.Stream()
    busy = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(side):
        t = torch.from_dlpack(m.predict(x, output="device"))
        for _ in range(20):  # keep the stream busy, then read the output last
            product = busy @ busy
        total = (t * (1 + torch.tanh(product[:1, :1]) * 0)).sum()
        del t  # our memory goes back to the device's spares while the side stream may still read it
    m.predict(np.zeros_like(x), output="device")  # reuses it, after waiting for the side stream
    torch.cuda.synchronize()
    assert abs(total.item() - float(expected.sum())) < 1e-3


def test_host_inputs_can_ask_for_device_outputs_and_device_inputs_for_host_outputs(torch_cuda):
    torch = torch_cuda
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    on_device = m.predict(x, output="device")
    assert isinstance(on_device, retarget.DeviceArray)
    np.testing.assert_allclose(on_device.numpy(), expected, rtol=1e-5, atol=1e-5)
    on_host = m.predict(torch.from_numpy(x).cuda(), output="host")
    assert isinstance(on_host, np.ndarray)


def test_device_inputs_of_the_wrong_dtype_or_layout_are_refused(torch_cuda):
    torch = torch_cuda
    module, x, _ = mlp_module()
    m = retarget.load(retarget.compile(module, "cuda:host"), device="cuda")
    with pytest.raises(retarget.errors.InputError, match="must be f32"):
        m.predict(torch.from_numpy(x).cuda().half())
    wide = torch.from_numpy(np.ascontiguousarray(np.concatenate([x, x], axis=1))).cuda()
    with pytest.raises(retarget.errors.InputError, match="non-contiguous"):
        m.predict(wide[:, ::2])


def test_device_dump_describes_the_gpu(cuda_device):
    from retarget_cuda.driver import CUDA

    dump = CUDA.dump(cuda_device.info.id)
    assert dump["available"] and dump["multiprocessors"] > 0 and dump["memory_bytes"] > 0
    assert dump["max_threads_per_block"] == 1024 and dump["subgroup_size"] == 32


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_matmuls_on_wmma_fragments_match_numpy(cuda_device, dt):
    """cuda:host lists wmma shapes (sm_70 on; bf16 from sm_80), so these take the core's tiled fragment matmul."""
    from retarget.ir import Builder, Function, Module, Value

    dtype = dtypes.DTYPES[dt]
    a, b = (rng.standard_normal(s).astype(dtype.np_dtype) for s in ((100, 72), (72, 90)))
    bias = rng.standard_normal(90).astype(dtype.np_dtype)
    args = [Value(TensorType(a.shape, dtype)), Value(TensorType(b.shape, dtype))]
    fn = Function("main", args)
    bld = Builder(fn)
    y = bld.op("rt.add", [bld.op("rt.matmul", args), bld.constant(bias)])
    fn.returns = [bld.op("rt.max", [y, bld.constant(np.zeros((), dtype.np_dtype))])]
    out = retarget.load(retarget.compile(Module({"main": fn}), "cuda:host"), device="cuda").main(a, b)
    product = (a.astype(np.float32) @ b.astype(np.float32)).astype(dtype.np_dtype).astype(np.float32)
    expected = np.maximum((product + bias.astype(np.float32)).astype(dtype.np_dtype).astype(np.float32), 0)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-2, atol=2e-2)
