import pytest


@pytest.fixture
def decompositions(monkeypatch) -> list:
    """The programs that the torch importer decomposed to core ATen (`run_decompositions`), in order."""
    torch = pytest.importorskip("torch")
    calls = []
    original = torch.export.ExportedProgram.run_decompositions

    def spy(self, *args, **kwargs):
        calls.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", spy)
    return calls
