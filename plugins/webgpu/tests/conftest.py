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
    what WGSL cannot store, kept in 32-bit words (`word_parts`, `word_pairs` in the shared renderer)."""
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
