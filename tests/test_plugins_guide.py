"""docs/plugins.md is the whole plugin contract for a third party: keep its examples true to the code."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from retarget.protocols import Device, Driver, missing_members

GUIDE = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()


def _block(after: str, language: str = "") -> str:
    """The first fenced block of `language` (none: a plain ``` block) after the text `after`."""
    start = GUIDE.index(after)
    blocks = re.finditer(r"^```(\w*)\n(.*?)^```$", GUIDE, re.M | re.S)
    return next(b.group(2) for b in blocks if b.start() > start and b.group(1) == language)


@pytest.mark.parametrize("heading, protocol", [("### Driver and DeviceInfo", Driver),
                                               ("### Device, Buffer, Executable", Device)])
def test_the_guides_example_has_every_member_of_its_protocol(heading, protocol):
    code = _block(heading, "python")
    shown = set(re.findall(r"def (\w+)\(self", code)) | set(re.findall(r"(?:self\.|^    )(\w+) = ", code, re.M))
    required = set(missing_members(object(), protocol))
    assert required <= shown, f"{heading} does not show {sorted(required - shown)}"


def test_the_guides_tiny_model_gives_the_answer_it_shows_from_python(tmp_path, monkeypatch):
    (tmp_path / "tiny.mlir").write_text(_block("## Run a model on your plugin", "mlir"))
    monkeypatch.chdir(tmp_path)
    exec(_block("The same from Python:", "python").replace('device="acme"', 'device="local-sync"'), {})


def test_the_guides_tiny_model_gives_the_answer_it_shows_from_the_command_line(tmp_path):
    (tmp_path / "tiny.mlir").write_text(_block("## Run a model on your plugin", "mlir"))
    commands = _block("## Run a model on your plugin").splitlines()
    compile_line, run_line = (c.split("#")[0].strip() for c in commands[:2])
    shown = "\n".join(c.removeprefix("# ") for c in commands[2:] if c.startswith("#"))
    for line in (compile_line, run_line.replace("--device acme", "--device local-sync")):
        args = re.findall(r'"[^"]*"|\S+', line)[1:]
        result = subprocess.run([sys.executable, "-m", "retarget", *(a.strip('"') for a in args)], cwd=tmp_path,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == shown.strip()  # the values the Python example checks, as the CLI prints them


def test_the_guide_and_the_suite_name_the_same_torch_install():
    from retarget.testing.conformance.kit import TORCH_INSTALL

    for command in re.findall(r"pip install [^()]+?'(?=\s|\)|$)", TORCH_INSTALL):
        assert command in GUIDE, command


def test_the_scaffold_writes_the_guides_tiny_model():
    from retarget import scaffold

    written = (Path(scaffold.__file__).parent / "templates" / "examples" / "tiny.mlir.tmpl").read_text()
    assert written == _block("## Run a model on your plugin", "mlir")


def test_the_guides_models_of_retarget_testing_compile_and_run():
    pytest.importorskip("torch")
    code = _block("a zoo\nof real networks in torch", "python")
    namespace = {}
    exec("import retarget\n" + code.replace('device="acme"', 'device="local-sync"').replace('"mobilenet_v2"', '"mlp"'),
         namespace)
    assert abs(namespace["y"] - namespace["expected"]).max() < 1e-5 and namespace["art"].functions
