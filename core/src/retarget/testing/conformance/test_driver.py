"""A HAL driver: enumeration, and on its first available device, buffers, copies, fills, dispatch
of the reference graphs in each command-buffer mode, barriers, waiting, and errors on bad use.

Copies and fills use offsets and sizes that are multiples of 4 (what every API supports);
`write` and `read` work at any byte offset. Reference kernels come from an installed target
whose code the device loads (see `kit.target_for`), and results are compared with vmvx."""

import json

import numpy as np
import pytest

from retarget.errors import RetargetError, UnknownDeviceError
from retarget.protocols import Device, DeviceInfo, ExecutableBinary, TargetDesc, missing_members
from retarget.testing.conformance import kit
from retarget.testing.conformance.fixtures import *  # noqa: F403
from retarget.testing.conformance.fixtures import RUN

rng = np.random.default_rng(0)


def _bytes(n: int) -> np.ndarray:
    return rng.integers(1, 255, n, dtype=np.uint8)  # no zero byte, so a fill of 0 shows


def _record(device, mode, *commands):
    """A command buffer of `commands`, each (method name, *arguments), ended."""
    cb = kit.command_buffer(device, mode)
    for name, *args in commands:
        getattr(cb, name)(*args)
    cb.end()
    return cb


def _run(device, mode, *commands) -> None:
    device.submit(_record(device, mode, *commands))
    device.wait()


# -- the driver -------------------------------------------------------------------------------------


def test_the_driver_is_named_as_registered(driver, driver_name):
    assert driver.name == driver_name


def test_enumerate_never_raises_and_says_why_a_device_is_unavailable(driver, driver_name):
    infos = driver.enumerate()
    assert isinstance(infos, list) and infos, "with no device, enumerate() returns an unavailable one saying why"
    for info in infos:
        assert isinstance(info, DeviceInfo), f"enumerate() returned {info!r}, not a retarget.protocols.DeviceInfo"
        assert info.driver == driver_name, \
            f"{info}: DeviceInfo.driver is {info.driver!r}; it must be the driver's name, {driver_name!r}"
        assert isinstance(info.id, str) and isinstance(info.name, str) and info.name, info
        assert info.available or (isinstance(info.reason, str) and info.reason), f"{info.uri} is unavailable, no reason"
        json.dumps(info.properties)
    ids = [i.id for i in infos]
    assert len(ids) == len(set(ids)), f"device ids repeat: {ids}"


def test_dump_of_each_available_device_is_plain_json(driver, driver_name):
    available = [d for d in driver.enumerate() if d.available]
    if not available:
        pytest.skip(kit.first_device(driver_name)[1])
    for info in available:
        dump = driver.dump(info.id)
        assert isinstance(dump, dict) and dump, f"dump({info.id!r}) is {dump!r}"
        json.dumps(dump)  # no default=str: every value must be JSON already


def test_creating_an_unknown_device_raises_unknown_device_error(driver):
    with pytest.raises(UnknownDeviceError):
        driver.create("no-such-device-42")


# -- memory -----------------------------------------------------------------------------------------


def test_the_device_describes_itself(device, driver_name):
    assert isinstance(device, Device), \
        f"the device lacks {', '.join(missing_members(device, Device))} of retarget.protocols.Device"
    assert device.info.driver == driver_name and device.info.available, \
        f"device.info is {device.info}; it must be the available DeviceInfo of driver {driver_name!r} it was made from"
    assert isinstance(device.formats, tuple) and device.formats and all(isinstance(f, str) for f in device.formats)
    assert kit.modes(device) and all(m is None or isinstance(m, str) for m in kit.modes(device))


def test_write_then_read_round_trips_at_any_byte_offset(device):
    buffer = device.allocate(1000)
    assert buffer.nbytes == 1000
    data = _bytes(1000)
    device.write(buffer, 0, data)
    small, floats = _bytes(7), rng.standard_normal(16).astype(np.float32)
    device.write(buffer, 13, small)
    device.write(buffer, 64, floats)
    data[13:20], data[64:128] = small, floats.view(np.uint8)
    got = np.asarray(device.read(buffer, 0, 1000))
    assert got.dtype == np.uint8 and got.shape == (1000,)
    np.testing.assert_array_equal(got, data)
    np.testing.assert_array_equal(np.asarray(device.read(buffer, 13, 7)), small)


def test_write_and_read_outside_a_buffer_raise_value_error(device):
    buffer = device.allocate(64)
    for bad in (lambda: device.write(buffer, 60, _bytes(8)), lambda: device.write(buffer, -4, _bytes(4)),
                lambda: device.read(buffer, 0, 65), lambda: device.read(buffer, 64, 4)):
        with pytest.raises(ValueError):
            bad()
    device.write(buffer, 0, np.arange(64, dtype=np.uint8))  # the buffer still works
    np.testing.assert_array_equal(np.asarray(device.read(buffer, 0, 64)), np.arange(64, dtype=np.uint8))


def test_wait_returns_when_nothing_was_submitted(device):
    device.wait()
    device.wait()


# -- transfer commands ----------------------------------------------------------------------------


def test_copy_moves_bytes_between_and_within_buffers(device):
    for mode in kit.modes(device):
        a, b = device.allocate(256), device.allocate(256)
        data, zeros = _bytes(256), np.zeros(256, np.uint8)
        device.write(a, 0, data)
        device.write(b, 0, zeros)
        _run(device, mode, ("copy", a, 16, b, 64, 128), ("copy", a, 0, a, 192, 64))
        want_b = zeros.copy()
        want_b[64:192] = data[16:144]
        want_a = data.copy()
        want_a[192:256] = data[0:64]
        np.testing.assert_array_equal(np.asarray(device.read(b, 0, 256)), want_b, err_msg=f"mode {mode}")
        np.testing.assert_array_equal(np.asarray(device.read(a, 0, 256)), want_a, err_msg=f"mode {mode}")


def test_fill_writes_a_byte_pattern(device):
    for mode in kit.modes(device):
        buffer = device.allocate(256)
        data = _bytes(256)
        device.write(buffer, 0, data)
        _run(device, mode, ("fill", buffer, 32, 64, 0xAB), ("fill", buffer, 128, 16, 0))
        data[32:96], data[128:144] = 0xAB, 0
        np.testing.assert_array_equal(np.asarray(device.read(buffer, 0, 256)), data, err_msg=f"mode {mode}")


def test_a_barrier_orders_commands_and_a_command_buffer_replays(device):
    for mode in kit.modes(device):
        a, b, c = device.allocate(128), device.allocate(128), device.allocate(128)
        cb = _record(device, mode, ("copy", a, 0, b, 0, 128), ("barrier",), ("copy", b, 0, c, 0, 128), ("barrier",),
                     ("fill", b, 0, 128, 0))
        for round in range(3):
            data = _bytes(128)
            device.write(a, 0, data)
            device.submit(cb)
            device.wait()
            np.testing.assert_array_equal(np.asarray(device.read(c, 0, 128)), data, err_msg=f"mode {mode}, {round}")
            np.testing.assert_array_equal(np.asarray(device.read(b, 0, 128)), np.zeros(128, np.uint8))


def test_a_command_buffer_that_starts_with_a_barrier_sees_what_an_earlier_submit_wrote(device):
    """A module split across devices submits several command buffers to one device without waiting in
    between; each after the first starts with a barrier, which must order it after the earlier ones."""
    for mode in kit.modes(device):
        a = device.allocate(256)
        device.write(a, 0, np.zeros(256, np.uint8))
        first = _record(device, mode, ("fill", a, 0, 128, 0xAB))
        second = _record(device, mode, ("barrier",), ("copy", a, 0, a, 128, 128))
        device.submit(first)
        device.submit(second)
        device.wait()
        np.testing.assert_array_equal(np.asarray(device.read(a, 128, 128)), np.full(128, 0xAB, np.uint8),
                                      err_msg=f"mode {mode}")


def test_copy_and_fill_outside_a_buffer_raise_value_error(device):
    a, b = device.allocate(256), device.allocate(256)
    cb = device.command_buffer()
    for bad in (lambda: cb.copy(a, 0, b, 200, 64), lambda: cb.copy(a, 248, b, 0, 16),
                lambda: cb.fill(a, 252, 8, 1), lambda: cb.fill(b, 256, 4, 1)):
        with pytest.raises(ValueError):
            bad()


def test_an_ended_command_buffer_rejects_new_commands(device):
    a, b = device.allocate(64), device.allocate(64)
    cb = device.command_buffer()
    cb.fill(a, 0, 64, 1)
    cb.end()
    with pytest.raises(RuntimeError):
        cb.fill(a, 0, 64, 2)
    with pytest.raises(RuntimeError):
        cb.copy(a, 0, b, 0, 64)


# -- executables and dispatch -----------------------------------------------------------------------


def test_a_foreign_executable_format_is_refused_with_a_reason(device):
    desc = TargetDesc(backend="conformance", arch="none", format="retarget-conformance-no-such-format")
    reason = device.can_load(desc.format, desc)
    assert isinstance(reason, str) and reason, "can_load() of an unknown format must say why not"
    with pytest.raises(RetargetError):
        device.load_executable(ExecutableBinary(desc.format, desc, b"\0", []))


def _target(device, driver_name):
    backend, desc = kit.target_for(driver_name, device, prefer_plugin=kit.owner("drivers", driver_name))
    if backend is None:
        pytest.skip(f"no installed target produces code that {device.info.uri} loads")
    return backend, desc


def test_reference_graphs_dispatch_and_match_vmvx(device, driver_name, graph_name, reference_graph):
    backend, desc = _target(device, driver_name)
    module, inputs, _ = reference_graph
    reference = RUN.reference(f"graph:{graph_name}", module)
    for mode in kit.modes(device):
        program = kit.HalProgram(device, backend, desc, module, mode)
        assert [e.name for e in program.executable.entry_points] == [d.name for d in program.dispatches]
        for round in range(3):  # one recorded command buffer, submitted three times with new inputs
            inputs_now = kit.varied(inputs, round)
            (got,) = program(*inputs_now)
            kit.assert_matches(got, reference(*inputs_now)[0],
                               f"{graph_name} ({desc.name}) on {device.info.uri}, mode {mode}, submit {round + 1}")


def test_a_dynamic_dispatch_takes_its_sizes_at_record_time(device, driver_name):
    """`dispatch(..., scalars=..., workgroup_count=...)`: one executable, recorded at two sizes."""
    from retarget.testing import dynamic

    if not kit.dispatch_takes_sizes(device):
        pytest.skip(f"{device.info.uri}'s command buffers take no sizes (dynamic shapes are optional)")
    backend, desc = _target(device, driver_name)
    kit.compile_dynamic(backend, desc, kit.DYNAMIC_CASES[0])  # skips if the target refuses
    dynamic.check(desc, device.info.uri, [kit.DYNAMIC_CASES[0]])


def test_a_dispatch_with_bindings_that_do_not_fit_raises_value_error(device, driver_name):
    from retarget.testing.graphs import add_module

    backend, desc = _target(device, driver_name)
    module, _, _ = add_module(n=64)
    program = kit.HalProgram(device, backend, desc, kit.prepare(module), None)
    x, y, z = (program.binding(v) for v in (*program.dispatches[0].inputs, *program.dispatches[0].outputs))
    buffer, offset, nbytes = z
    cb = device.command_buffer()
    for bindings in ([x, y], [x, y, (buffer, offset, nbytes - 4)], [x, y, (buffer, buffer.nbytes - 4, nbytes)]):
        with pytest.raises(ValueError):
            cb.dispatch(program.executable, 0, bindings)
