"""The whole suite's settings: every SPIR-V module that any test compiles for vulkan-spirv goes through spirv-val
(`retarget_vulkan_spirv.validate`), where spirv-val is installed and the environment does not say otherwise; and
the compile cache (`retarget.cache`) is a directory of this run's own, so that no test reads what an earlier
run or the user's own compiles left, and none writes into the home directory."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

if "RETARGET_CACHE_DIR" not in os.environ:
    os.environ["RETARGET_CACHE_DIR"] = tempfile.mkdtemp(prefix="retarget-test-cache-")
    atexit.register(shutil.rmtree, os.environ["RETARGET_CACHE_DIR"], True)

if "RETARGET_VULKAN_SPIRV_VAL" not in os.environ and (
        (Path(sys.executable).parent / "spirv-val").exists() or shutil.which("spirv-val")):
    os.environ["RETARGET_VULKAN_SPIRV_VAL"] = "1"
