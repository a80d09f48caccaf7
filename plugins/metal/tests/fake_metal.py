"""A stand-in for PyObjC's `Metal` module, so driver.py runs end to end on Linux: the calls it makes,
with PyObjC's spellings and return conventions (`(result, error)` for NSError out-parameters), and
kernels run on the CPU by msl_cpu. It enforces the Metal rules the driver must follow: one encoder
at a time per command buffer, each ended before the next starts and before commit; a pipeline
set before a dispatch; device-buffer offsets aligned to their element type; a command buffer
committed once; blit offsets in whole words. It is not Metal: it checks how the driver uses the
API, as this project understands it from Apple's documentation."""

from __future__ import annotations

import queue
import re
import threading
import time
from types import SimpleNamespace

import numpy as np
from msl_cpu import CpuLibrary, kernels

APPLE_FAMILY = 7  # an M1
# With ASYNCHRONOUS, a queue runs its committed command buffers in order on a thread of its own, as a GPU
# does, and waitUntilCompleted blocks until they are done; without it, commit runs them at once.
ASYNCHRONOUS = False
LATENCY_S = 0.002  # how long the asynchronous queue takes to start each command buffer
ITEMSIZE = {"float": 4, "half": 2, "bfloat": 2, "long": 8, "ulong": 8, "int": 4, "uint": 4, "short": 2,
            "ushort": 2, "char": 1, "uchar": 1}


class MetalUsageError(AssertionError):
    """The driver broke a rule of the Metal API."""


def MTLSizeMake(width, height, depth):  # noqa: N802 - Metal's name
    return SimpleNamespace(width=int(width), height=int(height), depth=int(depth))


class _Contents:
    def __init__(self, array):
        self.array = array

    def as_buffer(self, length):
        return memoryview(self.array)[:length]


class FakeBuffer:
    def __init__(self, length):
        self.array = np.zeros(length, dtype=np.uint8)

    def contents(self):
        return _Contents(self.array)

    def length(self):
        return self.array.size


class FakeError:
    def __init__(self, text):
        self.text = text

    def localizedDescription(self):  # noqa: N802
        return self.text


class FakeCompileOptions:
    def __init__(self):
        self.language_version, self.fast_math = None, True

    @classmethod
    def new(cls):
        return cls()

    def setLanguageVersion_(self, version):  # noqa: N802
        self.language_version = version

    def setFastMathEnabled_(self, enabled):  # noqa: N802
        self.fast_math = bool(enabled)


class MTLCompileOptions(FakeCompileOptions):
    pass


class FakeFunction:
    def __init__(self, library, name):
        self.library, self.name = library, name


class FakeLibrary:
    def __init__(self, source, options):
        self.source, self.options = source, options
        self.cpu = CpuLibrary(source)
        self.params = kernels(source)

    def newFunctionWithName_(self, name):  # noqa: N802
        return FakeFunction(self, name) if name in self.params else None


class FakePipeline:
    def __init__(self, function):
        self.function = function
        match = re.search(rf"max_total_threads_per_threadgroup\((\d+)\)\]\] kernel void {function.name}\(",
                          function.library.source)
        self.max_threads = int(match.group(1)) if match else 1024

    def maxTotalThreadsPerThreadgroup(self):  # noqa: N802
        return self.max_threads


class _Encoder:
    def __init__(self, command_buffer):
        self.cb, self.ended = command_buffer, False

    def _check(self):
        if self.ended:
            raise MetalUsageError("an ended encoder was used")

    def endEncoding(self):  # noqa: N802
        self._check()
        self.ended = True
        self.cb.active = None


class FakeComputeEncoder(_Encoder):
    def __init__(self, command_buffer, dispatch_type):
        super().__init__(command_buffer)
        self.dispatch_type = dispatch_type
        self.pipeline, self.buffers = None, {}

    def setComputePipelineState_(self, pipeline):  # noqa: N802
        self._check()
        self.pipeline = pipeline

    def setBuffer_offset_atIndex_(self, buffer, offset, index):  # noqa: N802
        self._check()
        if not 0 <= index < 31:
            raise MetalUsageError(f"buffer index {index} is outside the argument table (31 entries)")
        self.buffers[index] = (buffer, offset)

    def setBytes_length_atIndex_(self, data, length, index):  # noqa: N802
        self._check()
        if not 0 <= index < 31 or length > 4096:
            raise MetalUsageError(f"setBytes of {length} bytes at index {index}: Metal takes up to 4 KB in 31 slots")
        self.buffers[index] = (FakeBytes(bytes(data)[:length]), 0)

    def memoryBarrierWithScope_(self, scope):  # noqa: N802
        self._check()
        self.cb.log.append(("barrier", scope))

    def dispatchThreadgroups_threadsPerThreadgroup_(self, groups, threads):  # noqa: N802
        self._check()
        if self.pipeline is None:
            raise MetalUsageError("dispatch before setComputePipelineState:")
        function = self.pipeline.function
        addresses = []
        for i, ctype in enumerate(function.library.params[function.name]):
            if i not in self.buffers:
                raise MetalUsageError(f"{function.name}: buffer {i} is not bound")
            buffer, offset = self.buffers[i]
            if ctype.startswith("&"):  # a scalar: its bytes, from setBytes
                addresses.append(buffer.array.ctypes.data)
                continue
            if offset % ITEMSIZE[ctype.split()[-1]]:
                raise MetalUsageError(f"{function.name}: buffer {i} ({ctype}) bound at unaligned offset {offset}")
            addresses.append(buffer.array.ctypes.data + offset)
        grid = (groups.width, groups.height, groups.depth)
        block = (threads.width, threads.height, threads.depth)
        if block[0] * block[1] * block[2] > self.pipeline.max_threads:
            raise MetalUsageError(f"{function.name}: {block} threads exceed the pipeline's maximum")
        self.cb.log.append(("dispatch", function.name, grid, block))
        held = list(self.buffers.values())  # setBytes copies live as long as the work that reads them
        self.cb.work.append(lambda: (held, function.library.cpu.launch(function.name, addresses, grid, block)))


class FakeBytes:
    """What setBytes copies: the argument's bytes, kept for the dispatch."""

    def __init__(self, data: bytes):
        import numpy as np

        self.array = np.frombuffer(bytearray(data), dtype=np.uint8)


class FakeBlitEncoder(_Encoder):
    def copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(self, src, src_offset, dst, dst_offset,  # noqa: N802
                                                                    size):
        self._check()
        if src_offset % 4 or dst_offset % 4 or size % 4:
            raise MetalUsageError("blit copies on macOS take offsets and sizes in whole words")

        def copy():
            dst.array[dst_offset:dst_offset + size] = src.array[src_offset:src_offset + size]

        self.cb.log.append(("copy", src_offset, dst_offset, size))
        self.cb.work.append(copy)

    def fillBuffer_range_value_(self, buffer, byte_range, value):  # noqa: N802
        self._check()
        location, length = byte_range

        def fill():
            buffer.array[location:location + length] = value

        self.cb.log.append(("fill", location, length, value))
        self.cb.work.append(fill)


class FakeCommandBuffer:
    def __init__(self, queue):
        self.queue = queue
        self.active = None
        self.log, self.work = [], []
        self.committed = False

    def _encoder(self, encoder):
        if self.active is not None:
            raise MetalUsageError("a new encoder while another is active")
        self.active = encoder
        return encoder

    def computeCommandEncoderWithDispatchType_(self, dispatch_type):  # noqa: N802
        return self._encoder(FakeComputeEncoder(self, dispatch_type))

    def blitCommandEncoder(self):  # noqa: N802
        return self._encoder(FakeBlitEncoder(self))

    def commit(self):
        if self.committed:
            raise MetalUsageError("a command buffer committed twice")
        if self.active is not None:
            raise MetalUsageError("commit with an encoder still active")
        self.committed = True
        self.queue.device.committed.append(self)
        self.completed = threading.Event()
        if self.queue.worker is not None:
            self.queue.work.put(self)
        else:
            self.run()

    def run(self):
        for step in self.work:
            step()
        self.completed.set()

    def waitUntilCompleted(self):  # noqa: N802
        if not self.committed:
            raise MetalUsageError("waiting on a command buffer that was never committed")
        self.completed.wait()

    def status(self):
        return 4  # MTLCommandBufferStatusCompleted

    def error(self):
        return None

    def GPUStartTime(self):  # noqa: N802
        return 1.0

    def GPUEndTime(self):  # noqa: N802
        return 1.5


class FakeQueue:
    def __init__(self, device):
        self.device = device
        self.work: queue.Queue = queue.Queue()
        self.gate = threading.Event()
        self.gate.set()
        self.worker = threading.Thread(target=self._serve, daemon=True) if ASYNCHRONOUS else None
        if self.worker is not None:
            self.worker.start()

    def _serve(self):
        while True:
            cb = self.work.get()
            time.sleep(LATENCY_S)
            self.gate.wait()  # a test may hold the queue
            cb.run()

    def commandBuffer(self):  # noqa: N802
        return FakeCommandBuffer(self)


class FakeDevice:
    def __init__(self, name="Apple M1"):
        self._name = name
        self.committed: list[FakeCommandBuffer] = []
        self.libraries: list[FakeLibrary] = []

    def name(self):
        return self._name

    def supportsFamily_(self, family):  # noqa: N802
        return 1001 <= family <= 1000 + APPLE_FAMILY or family in (2002, 5001)

    def registryID(self):  # noqa: N802
        return 4242

    def hasUnifiedMemory(self):  # noqa: N802
        return True

    def isLowPower(self):  # noqa: N802
        return False

    def maxThreadsPerThreadgroup(self):  # noqa: N802
        return MTLSizeMake(1024, 1024, 1024)

    def maxThreadgroupMemoryLength(self):  # noqa: N802
        return 32768

    def maxBufferLength(self):  # noqa: N802
        return 1 << 34

    def recommendedMaxWorkingSetSize(self):  # noqa: N802
        return 1 << 33

    def newCommandQueue(self):  # noqa: N802
        return FakeQueue(self)

    def newBufferWithLength_options_(self, length, options):  # noqa: N802
        if length <= 0:
            raise MetalUsageError("Metal has no empty buffers")
        return FakeBuffer(length)

    def newLibraryWithSource_options_error_(self, source, options, error):  # noqa: N802
        try:
            library = FakeLibrary(source, options)
        except RuntimeError as e:
            return None, FakeError(str(e))
        self.libraries.append(library)
        return library, None

    def newComputePipelineStateWithFunction_error_(self, function, error):  # noqa: N802
        return FakePipeline(function), None


DEVICE = FakeDevice()


def MTLCopyAllDevices():  # noqa: N802
    return [DEVICE]


def MTLCreateSystemDefaultDevice():  # noqa: N802
    return DEVICE
