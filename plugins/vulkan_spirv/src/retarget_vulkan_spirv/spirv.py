"""A small writer of binary SPIR-V: ids, the module's sections in their required order, and
uniqued types and constants. It knows the encoding, not the kernel IR (`codegen.py` does).

Numbers come from the SPIR-V 1.6 specification (unified) and the GLSL.std.450 extended
instruction set; only what the code generator uses is listed.
"""

from __future__ import annotations

import struct

MAGIC = 0x07230203
GENERATOR = 0  # "unregistered tool"

OP = {
    "Name": 5, "Extension": 10, "ExtInstImport": 11, "ExtInst": 12, "MemoryModel": 14, "EntryPoint": 15,
    "ExecutionMode": 16, "Capability": 17,
    "TypeVoid": 19, "TypeBool": 20, "TypeInt": 21, "TypeFloat": 22, "TypeVector": 23, "TypeArray": 28,
    "TypeRuntimeArray": 29, "TypeStruct": 30, "TypePointer": 32, "TypeFunction": 33,
    "ConstantTrue": 41, "ConstantFalse": 42, "Constant": 43,
    "Function": 54, "FunctionEnd": 56, "Variable": 59, "Load": 61, "Store": 62, "AccessChain": 65,
    "Decorate": 71, "MemberDecorate": 72, "CompositeExtract": 81,
    "ConvertFToU": 109, "ConvertFToS": 110, "ConvertSToF": 111, "ConvertUToF": 112, "UConvert": 113,
    "SConvert": 114, "FConvert": 115, "Bitcast": 124,
    "SNegate": 126, "FNegate": 127, "IAdd": 128, "FAdd": 129, "ISub": 130, "FSub": 131, "IMul": 132, "FMul": 133,
    "UDiv": 134, "SDiv": 135, "FDiv": 136, "UMod": 137, "SRem": 138, "FRem": 140,
    "IsNan": 156, "IsInf": 157,
    "LogicalEqual": 164, "LogicalNotEqual": 165, "LogicalOr": 166, "LogicalAnd": 167, "LogicalNot": 168,
    "Select": 169, "IEqual": 170, "INotEqual": 171, "UGreaterThan": 172, "SGreaterThan": 173,
    "UGreaterThanEqual": 174, "SGreaterThanEqual": 175, "ULessThan": 176, "SLessThan": 177,
    "ULessThanEqual": 178, "SLessThanEqual": 179, "FOrdEqual": 180, "FOrdNotEqual": 182, "FUnordNotEqual": 183,
    "FOrdLessThan": 184, "FUnordLessThan": 185, "FOrdGreaterThan": 186, "FOrdLessThanEqual": 188,
    "FOrdGreaterThanEqual": 190,
    "ShiftRightLogical": 194, "ShiftRightArithmetic": 195, "ShiftLeftLogical": 196, "BitwiseOr": 197,
    "BitwiseXor": 198, "BitwiseAnd": 199, "Not": 200,
    "ControlBarrier": 224, "Phi": 245, "LoopMerge": 246, "SelectionMerge": 247, "Label": 248, "Branch": 249,
    "BranchConditional": 250, "Return": 253, "CompositeConstruct": 80,
    # SPV_KHR_cooperative_matrix
    "TypeCooperativeMatrixKHR": 4456, "CooperativeMatrixLoadKHR": 4457, "CooperativeMatrixStoreKHR": 4458,
    "CooperativeMatrixMulAddKHR": 4459,
}
CAPABILITY = {
    "Shader": 1, "Float16": 9, "Float64": 10, "Int64": 11, "Int16": 22, "Int8": 39,
    "StorageBuffer16BitAccess": 4433, "StorageBuffer8BitAccess": 4448, "CooperativeMatrixKHR": 6022,
    "VulkanMemoryModel": 5345, "SignedZeroInfNanPreserve": 4466,
}
# Capabilities that need an OpExtension below SPIR-V 1.5 (8-bit storage) or 1.3 (16-bit storage).
CAPABILITY_EXTENSION = {"StorageBuffer16BitAccess": ("SPV_KHR_16bit_storage", (1, 3)),
                        "StorageBuffer8BitAccess": ("SPV_KHR_8bit_storage", (1, 5)),
                        "CooperativeMatrixKHR": ("SPV_KHR_cooperative_matrix", (99, 0)),
                        "SignedZeroInfNanPreserve": ("SPV_KHR_float_controls", (1, 4))}
STORAGE = {"Input": 1, "Workgroup": 4, "Function": 7, "PushConstant": 9, "StorageBuffer": 12}
DECORATION = {"Block": 2, "ArrayStride": 6, "BuiltIn": 11, "NonWritable": 24, "Binding": 33, "DescriptorSet": 34,
              "Offset": 35}
BUILTIN = {"WorkgroupId": 26, "LocalInvocationId": 27}
EXECUTION_MODEL_GLCOMPUTE = 5
EXECUTION_MODE_LOCAL_SIZE = 17
EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE = 4461
ADDRESSING_LOGICAL, MEMORY_MODEL_GLSL450, MEMORY_MODEL_VULKAN = 0, 1, 3
SCOPE_WORKGROUP, SCOPE_SUBGROUP = 2, 3
COOPERATIVE_MATRIX_USE = {"a": 0, "b": 1, "acc": 2}  # MatrixAKHR, MatrixBKHR, MatrixAccumulatorKHR
ROW_MAJOR = 0  # CooperativeMatrixLayout RowMajorKHR
SEMANTICS_ACQUIRE_RELEASE_WORKGROUP = 0x8 | 0x100  # AcquireRelease | WorkgroupMemory
LOOP_CONTROL = {"none": 0, "unroll": 1, "dont_unroll": 2}

GLSL = {  # GLSL.std.450 instruction numbers
    "RoundEven": 2, "FAbs": 4, "SAbs": 5, "FSign": 6, "SSign": 7, "Floor": 8, "Ceil": 9, "Sin": 13, "Cos": 14,
    "Tan": 15, "Atan": 18, "Tanh": 21, "Atan2": 25, "Pow": 26, "Exp": 27, "Log": 28, "Sqrt": 31,
    "InverseSqrt": 32, "FMin": 37, "UMin": 38, "SMin": 39, "FMax": 40, "UMax": 41, "SMax": 42, "FClamp": 43,
    "Fma": 50, "FrexpStruct": 52, "Ldexp": 53,
}


def string_words(text: str) -> list[int]:
    """A literal string: UTF-8, NUL-terminated, padded to whole little-endian words."""
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


class Module:
    """Sections of one SPIR-V module; `emit` appends an instruction to a section and returns its result id."""

    SECTIONS = ("capability", "extension", "import", "memory_model", "entry_point", "execution_mode", "debug",
                "annotation", "global", "function_head", "function_vars", "function")

    def __init__(self, version: tuple[int, int] = (1, 3)):
        self.version = version
        self.bound = 1
        self.sections: dict[str, list[list[int]]] = {s: [] for s in self.SECTIONS}
        self._types: dict[tuple, int] = {}
        self._constants: dict[tuple, int] = {}
        self.constant_values: dict[int, object] = {}  # constant id -> its Python value, for folding
        self.capabilities: set[str] = set()
        self.extensions: set[str] = set()

    def id(self) -> int:
        self.bound += 1
        return self.bound - 1

    def emit(self, section: str, opcode: str, *operands) -> None:
        """One instruction; operands are ints (ids, literals) or lists of ints."""
        words: list[int] = []
        for operand in operands:
            words.extend(operand if isinstance(operand, list) else [operand])
        self.sections[section].append([(len(words) + 1) << 16 | OP[opcode], *words])

    def op(self, section: str, opcode: str, result_type: int | None, *operands) -> int:
        """An instruction with a result id (and a result type unless None)."""
        rid = self.id()
        head = [rid] if result_type is None else [result_type, rid]
        self.emit(section, opcode, *head, *operands)
        return rid

    # -- module-level declarations ----------------------------------------------------------------
    def capability(self, name: str) -> None:
        if name in self.capabilities:
            return
        self.capabilities.add(name)
        self.emit("capability", "Capability", CAPABILITY[name])
        extension, core_since = CAPABILITY_EXTENSION.get(name, (None, None))
        if extension and self.version < core_since:
            self.extension(extension)

    def extension(self, name: str) -> None:
        if name not in self.extensions:
            self.extensions.add(name)
            self.emit("extension", "Extension", string_words(name))

    def decorate(self, target: int, decoration: str, *literals: int) -> None:
        self.emit("annotation", "Decorate", target, DECORATION[decoration], *literals)

    def member_decorate(self, struct_id: int, member: int, decoration: str, *literals: int) -> None:
        self.emit("annotation", "MemberDecorate", struct_id, member, DECORATION[decoration], *literals)

    def name(self, target: int, text: str) -> None:
        self.emit("debug", "Name", target, string_words(text))

    # -- types, uniqued --------------------------------------------------------------------------
    def type(self, opcode: str, *operands: int, unique: bool = True) -> int:
        key = (opcode, *operands)
        if unique and key in self._types:
            return self._types[key]
        tid = self.op("global", opcode, None, *operands)
        if unique:
            self._types[key] = tid
        return tid

    def type_int(self, bits: int, signed: bool = True) -> int:
        return self.type("TypeInt", bits, int(signed))

    def type_float(self, bits: int) -> int:
        return self.type("TypeFloat", bits)

    def type_bool(self) -> int:
        return self.type("TypeBool")

    def pointer(self, storage: str, pointee: int) -> int:
        return self.type("TypePointer", STORAGE[storage], pointee)

    # -- constants, uniqued ------------------------------------------------------------------------
    def constant(self, type_id: int, value, bits: int, kind: str) -> int:
        """A scalar constant of `type_id` (`kind` float, int or bool; `bits` its width)."""
        if kind == "float":
            fmt = {16: "<e", 32: "<f", 64: "<d"}[bits]
            raw = struct.pack(fmt, float(value))
            key = (type_id, raw)
        elif kind == "bool":
            key = (type_id, bool(value))
        else:
            value = int(value) & ((1 << bits) - 1)
            raw = value.to_bytes(max(4, bits // 8), "little")
            key = (type_id, raw)
        if key in self._constants:
            return self._constants[key]
        if kind == "bool":
            cid = self.op("global", "ConstantTrue" if value else "ConstantFalse", type_id)
        else:
            raw = raw + b"\0" * (-len(raw) % 4)
            cid = self.op("global", "Constant", type_id, list(struct.unpack(f"<{len(raw) // 4}I", raw)))
        self._constants[key] = cid
        self.constant_values[cid] = value
        return cid

    # -- the binary ----------------------------------------------------------------------------------
    def assemble(self) -> bytes:
        major, minor = self.version
        words = [MAGIC, major << 16 | minor << 8, GENERATOR, self.bound, 0]
        for section in self.SECTIONS:
            for instruction in self.sections[section]:
                words.extend(instruction)
        return struct.pack(f"<{len(words)}I", *words)
