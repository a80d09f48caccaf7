"""DLPack without a framework (`retarget.dlpack`): our capsules are what numpy and torch read, and we read theirs.
The CPU stands in for a GPU here (kDLCPU memory); the cuda plugin's device tests do the same with CUDA memory."""

import gc

import numpy as np
import pytest
from retarget import dlpack
from retarget.errors import InputError
from retarget.ir import dtypes


class _Exported:
    """A host array handed out through `dlpack.export`, as a driver's DeviceArray hands out device memory."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack_device__(self):
        return (dlpack.CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return dlpack.export(self.array.ctypes.data, (dlpack.CPU, 0), self.array.shape,
                             dtypes.from_numpy(self.array.dtype), self.array, versioned)


@pytest.mark.parametrize("dt", ["float32", "float16", "int64", "int8", "bool"])
def test_numpy_reads_our_capsule_without_a_copy(dt):
    array = (np.arange(12) % 3).astype(dt).reshape(3, 4)
    seen = np.from_dlpack(_Exported(array))
    assert seen.dtype == array.dtype and seen.shape == (3, 4)
    assert seen.ctypes.data == array.ctypes.data


def test_torch_reads_our_capsule_legacy_and_versioned():
    torch = pytest.importorskip("torch")
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = torch.from_dlpack(_Exported(array))
    assert tensor.data_ptr() == array.ctypes.data and tensor.tolist() == array.tolist()
    legacy = torch.utils.dlpack.from_dlpack(_Exported(array).__dlpack__())  # a bare "dltensor" capsule
    assert legacy.data_ptr() == array.ctypes.data


def test_what_we_export_stays_alive_until_the_consumer_lets_go():
    array = np.arange(4, dtype=np.float32)
    before = len(dlpack._LIVE)
    seen = np.from_dlpack(_Exported(array))
    assert len(dlpack._LIVE) == before + 1
    del seen
    gc.collect()
    assert len(dlpack._LIVE) == before


def test_a_capsule_nobody_consumed_frees_what_it_held():
    before = len(dlpack._LIVE)
    capsule = _Exported(np.zeros(3, np.float32)).__dlpack__()
    assert len(dlpack._LIVE) == before + 1
    del capsule
    gc.collect()
    assert len(dlpack._LIVE) == before


def test_borrowing_a_torch_tensor_reads_its_address_shape_dtype_and_layout():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    b = dlpack.borrow(t)
    assert (b.address, b.device, b.shape, b.dtype, b.contiguous) == (t.data_ptr(), (1, 0), (3, 4), dtypes.f16, True)
    assert b.nbytes == 24
    b.release()
    b.release()  # once only
    assert not dlpack.borrow(t.t()).contiguous
    offset = dlpack.borrow(t[1])
    assert offset.address == t.data_ptr() + 8 and offset.shape == (4,)


def test_borrowing_reads_every_element_type_we_have():
    for name in ("f64", "f32", "f16", "i64", "i32", "i16", "i8", "ui8", "i1"):
        array = np.zeros(2, dtypes.DTYPES[name].np_dtype)
        assert dlpack.borrow(array).dtype == dtypes.DTYPES[name], name


def test_an_object_whose_dlpack_fails_is_an_input_error():
    class Broken:
        def __dlpack__(self, stream=None):
            raise BufferError("cannot export a non-writable view")

    with pytest.raises(InputError, match="cannot export a non-writable view"):
        dlpack.borrow(Broken())


def test_device_names_follow_dlpack_s_device_types():
    assert dlpack.device_name((2, 1)) == "cuda:1" and dlpack.device_name((99, 0)) == "DLPack device type 99:0"
    assert dlpack.device_of(np.zeros(1)) == (1, 0) and dlpack.device_of(object()) is None
