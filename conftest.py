"""The whole suite's settings: every SPIR-V module that any test compiles for vulkan-spirv goes through spirv-val
(`retarget_vulkan_spirv.validate`), where spirv-val is installed and the environment does not say otherwise."""

import os
import shutil
import sys
from pathlib import Path

if "RETARGET_VULKAN_SPIRV_VAL" not in os.environ and (
        (Path(sys.executable).parent / "spirv-val").exists() or shutil.which("spirv-val")):
    os.environ["RETARGET_VULKAN_SPIRV_VAL"] = "1"
