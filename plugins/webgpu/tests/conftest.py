import pytest


@pytest.fixture(scope="session")
def webgpu_device():
    """The first WebGPU adapter's device (lavapipe on a machine without a GPU), or a skip that says why."""
    from retarget_webgpu.driver import WEBGPU

    infos = WEBGPU.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no WebGPU adapter: {'; '.join(d.reason for d in infos)}")
    return WEBGPU.create(available[0].id)


@pytest.fixture(scope="session")
def tokens_and_masks():
    """(model, token ids): token ids (i64) in; argmax (i64) and a mask (bool) out, and a mask that crosses kernels:
    what WGSL has no type for: kept in 32-bit words (`word_parts` in the shared renderer) and computed in a pair of
    them (`emulated`)."""
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 12)

        def forward(self, ids):
            x = self.embed(ids)
            mask = x > x.mean(-1, keepdim=True)  # a bool between a reduction and its readers
            y = x.softmax(-1).masked_fill(mask, 0.0)
            return y, mask, y.argmax(-1) - 7, ids * 3 - 100

    torch.manual_seed(0)
    return Model().eval(), torch.tensor([[3, 49, 0, 7, 7], [1, 2, 48, 0, 30]])


@pytest.fixture(scope="session")
def image_bytes():
    """(model, image): a uint8 RGBA image in (HWC, as a canvas gives it), normalized to f32 inside, and 8- and
    16-bit integers out, whose arithmetic wraps at their width: what WGSL holds as parts of u32 words."""
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def forward(self, image):
            x = image.permute(2, 0, 1).float() / 255.0
            return (x.mean((1, 2)), image // 3, image.to(torch.int8) + 100, (image.to(torch.int16) - 128) * 300,
                    image >> 4)

    torch.manual_seed(0)
    return Model().eval(), torch.randint(0, 256, (5, 7, 4), dtype=torch.uint8)


@pytest.fixture(scope="session")
def wide_integers():
    """(model, x): int64 in and out past 32 bits, which WGSL computes in pairs of u32 words: a constant past 2^32,
    sums that carry between the words, floor division and modulo of negatives, a shift, max and argmax, abs of the
    smallest int64, and a cast to float."""
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def forward(self, x):
            return (x * 3 - 2**40, x.cumsum(0), x.sum(0), x // 7, x % 1000003, x >> 9, x.max(0).values, x.argmax(0),
                    x.abs(), x.float())

    x = torch.tensor([[2**40 + 12345, -1, 2**32, -(2**63)], [-(2**50) + 7, 2**31, 123456789012, 5],
                      [2**62, -(2**32) - 1, 0, -98765432109876], [7, 2**33 - 1, -(2**62), 2**63 - 1]])
    return Model().eval(), x
