"""The machine code (SASS) NVIDIA's Vulkan driver made of a kernel, from a pipeline cache that
`patched_matmul.py --pipeline-cache FILE` wrote on the GPU machine. The driver's statistics give register counts
but no code; its pipeline cache holds the code, in a layout NVIDIA does not document. What this relies on, seen with
driver 580 on an H100: a header, then one zstd frame; in the frame, the kernel's instructions (16 bytes each) start
at an offset that is 8 past a multiple of 16, after the driver's own tables. The code is found as the longest run
that nvdisasm decodes from the first place a 256-byte window decodes.

    python3 benchmarks/gpu/probes/vulkan_sass.py CACHE OUT.sass [--arch SM90]

Needs the `zstd` command and nvdisasm: `pip download --no-deps nvidia-cuda-nvdisasm` and unzip it, or set
NVDISASM to the binary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
INSTRUCTION = 16


def decodes(nvdisasm: str, arch: str, code: bytes, scratch: str) -> str | None:
    """nvdisasm's listing of `code`, or None where it finds an illegal instruction."""
    with open(scratch, "wb") as f:
        f.write(code)
    done = subprocess.run([nvdisasm, "-b", arch, scratch], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 and "error" not in done.stderr else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache")
    parser.add_argument("out")
    parser.add_argument("--arch", default="SM90")
    args = parser.parse_args()
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm or not shutil.which("zstd"):
        sys.exit("vulkan_sass.py: needs nvdisasm (NVDISASM=path) and the zstd command")
    blob = open(args.cache, "rb").read()
    start = blob.find(ZSTD_MAGIC)
    if start < 0:
        sys.exit(f"{args.cache}: no zstd frame; not an NVIDIA pipeline cache of the layout this knows")
    frame = subprocess.run(["zstd", "-d", "-c"], input=blob[start:], capture_output=True)
    raw = frame.stdout
    with tempfile.TemporaryDirectory() as tmp:
        scratch = os.path.join(tmp, "code.bin")
        first = next((at for at in range(8, len(raw) - 256, INSTRUCTION)
                      if decodes(nvdisasm, args.arch, raw[at:at + 256], scratch)), None)
        if first is None:
            sys.exit(f"{args.cache}: found no {args.arch} code in the cache")
        good, bad = first + INSTRUCTION, first + (len(raw) - first) // INSTRUCTION * INSTRUCTION
        while bad - good > INSTRUCTION:  # the longest prefix that decodes
            middle = first + ((good + bad) // 2 - first) // INSTRUCTION * INSTRUCTION
            good, bad = (middle, bad) if decodes(nvdisasm, args.arch, raw[first:middle], scratch) else (good, middle)
        listing = decodes(nvdisasm, args.arch, raw[first:good], scratch)
    with open(args.out, "w") as f:
        f.write(listing)
    counts = {op: listing.count(op) for op in ("HMMA", "LDSM", "LDG", "STS", "BAR.SYNC", "ISETP")}
    print(f"{args.out}: {(good - first) // INSTRUCTION} instructions; " +
          ", ".join(f"{op} {n}" for op, n in counts.items()))


if __name__ == "__main__":
    main()
