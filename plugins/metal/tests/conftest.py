import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # msl_cpu, fake_metal, metal_helpers: helpers of these tests



@pytest.fixture(scope="session")
def clangxx():
    """clang++ (it type-checks MSL against msl/ and builds it for the CPU), or a skip that says how to get it."""
    import msl_cpu

    path = msl_cpu.clang()
    if path is None:
        pytest.skip(f"{msl_cpu.CLANG} is not installed (apt-get install clang); it checks the generated MSL")
    return path


@pytest.fixture
def fake_metal(monkeypatch, clangxx):
    """The metal driver on Linux, through fake_metal (PyObjC's Metal API, kernels run on the CPU): the
    fake MTLDevice, an 'Apple M1' on a macOS that compiles MSL 3.1."""
    import fake_metal as fake
    from retarget_metal import driver

    fake.DEVICE = fake.FakeDevice()
    monkeypatch.setattr(driver, "_metal", lambda: fake)
    monkeypatch.setattr(driver, "unavailable_reason", lambda: None)
    monkeypatch.setattr(driver, "macos_msl", lambda: "3.1")
    return fake.DEVICE


@pytest.fixture(scope="session")
def metal_device():
    """The first real Metal device (macOS, Apple silicon), or a skip that says why there is none."""
    from retarget_metal.driver import METAL

    infos = METAL.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no Metal device: {'; '.join(d.reason for d in infos)}")
    return METAL.create(available[0].id)


@pytest.fixture(scope="session")
def zoo_artifacts():
    """Every zoo model compiled once for ZOO_TARGET: name -> (artifact, torch inputs, torch output)."""
    torch = pytest.importorskip("torch")
    import retarget
    from metal_helpers import ZOO_TARGET
    from retarget.compiler import import_model
    from retarget.testing import zoo

    out = {}
    for name in zoo.MODELS:
        model, inputs = zoo.make(name)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        out[name] = (retarget.compile(import_model(model, example_inputs=inputs), ZOO_TARGET), inputs, expected)
    return out
