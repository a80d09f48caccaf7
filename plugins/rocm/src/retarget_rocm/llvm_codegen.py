"""LLVM bitcode -> an AMDGPU object for one gfx, with llvmlite's LLVM (22 for llvmlite 0.50).

Run as a child process (`python -m retarget_rocm.llvm_codegen --cpu gfx942 --code-object-version 5`,
bitcode on stdin, the relocatable object on stdout), because LLVM aborts the whole process when its
code generator meets something it cannot select; the parent turns that into an error.

clang (any version from 14) only parses the HIP source: its bitcode carries that clang's guess of
the target (`target-cpu`, `target-features`) and `noinline` everywhere (-O0). Both are dropped, so
that this LLVM optimizes (O3) and generates code for the exact processor, which the clang may not
know. The code object version becomes a module flag (v4 for lld 14, v5 for lld 15 and newer).
"""

from __future__ import annotations

import argparse
import re
import sys

TRIPLE = "amdgcn-amd-amdhsa"
_TARGET_ATTRIBUTES = re.compile(r'\s*"target-(?:cpu|features)"="[^"]*"')
_NO_OPTIMIZE = re.compile(r"\b(?:noinline|optnone)\b ?")
_ATTRIBUTE_GROUP = re.compile(r"^attributes #\d+ = \{.*\}$", re.MULTILINE)
_FLAGS = re.compile(r"^!llvm\.module\.flags = !\{", re.MULTILINE)
_NODE = re.compile(r"^!(\d+) = ", re.MULTILINE)
_OLD_VERSION_FLAG = re.compile(r'"amdhsa_code_object_version"')


def retarget_ir(text: str, code_object_version: int) -> str:
    """clang's IR with its target guesses and -O0 markers dropped and the code object version set."""
    if _OLD_VERSION_FLAG.search(text):
        raise ValueError("the module already sets amdhsa_code_object_version")
    text = _ATTRIBUTE_GROUP.sub(lambda m: _NO_OPTIMIZE.sub("", _TARGET_ATTRIBUTES.sub("", m.group(0))), text)
    node = max((int(n) for n in _NODE.findall(text)), default=-1) + 1
    if _FLAGS.search(text):
        text = _FLAGS.sub(f"!llvm.module.flags = !{{!{node}, ", text, count=1)
    else:
        text += f"\n!llvm.module.flags = !{{!{node}}}\n"
    return text + f'\n!{node} = !{{i32 1, !"amdhsa_code_object_version", i32 {code_object_version * 100}}}\n'


def codegen(bitcode: bytes, cpu: str, code_object_version: int) -> bytes:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    machine = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=cpu, opt=3, reloc="pic")
    module = llvm.parse_assembly(retarget_ir(str(llvm.parse_bitcode(bitcode)), code_object_version))
    module.triple = TRIPLE
    module.data_layout = str(machine.target_data)
    module.verify()
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_object(module)


def llvm_major() -> int:
    import llvmlite.binding as llvm

    return llvm.llvm_version_info[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", required=True)
    parser.add_argument("--code-object-version", type=int, default=5)
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(codegen(sys.stdin.buffer.read(), args.cpu, args.code_object_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
