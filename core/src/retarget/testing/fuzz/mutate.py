"""Seeded mutators: each takes a `random.Random` and a seed input and returns a mutated copy.

They know a little about what they mutate, so that most outputs get past the first
check of the code under test: MLIR and `--input` text are mutated as tokens, ONNX as
its protobuf, a `.rtm` module either as raw bytes or as its entries, re-sealed with
correct checksums (as someone who edits a module on purpose would).
"""

from __future__ import annotations

import io
import json
import random
import re
import zipfile

# Numbers that find edge cases: zero, signs, powers of two around the int widths, huge and tiny floats.
INTERESTING_INTS = [0, 1, -1, 2, 3, 7, 8, 16, 63, 64, 127, 128, 255, 256, 1023, 4096, 65535, 65536,
                    2**31 - 1, 2**31, -2**31, 2**32, 2**40, 2**53 + 1, 2**63 - 1, 2**63, -2**63, 2**64, 10**12, 10**30]
INTERESTING_FLOATS = ["0.0", "-0.0", "1.0", "-1.5", "1e308", "-1e308", "1e-320", "3.4e38", "1e39", "nan", "inf",
                      "0x7FC00000", "0xFF800000", "0x0", "1.", ".5", "1e", "--1", "+-3"]

_MLIR_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%@#^!]?[A-Za-z_][\w$.\-]*|0x[0-9A-Fa-f]+'
                         r"|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|->|\S")
_NUMBER = re.compile(r"^[-+]?(0x[0-9A-Fa-f]+|\d+(\.\d*)?([eE][-+]?\d+)?)$")

# Words a hand-edited MLIR file might hold: types, attribute keywords, punctuation.
MLIR_WORDS = ["f32", "f16", "bf16", "f64", "i1", "i4", "i8", "i16", "i32", "i64", "ui8", "si32", "index", "none",
              "tensor<", "tensor<?x", "tensor<*x", "vector<4xf32>", "memref<2xf32>", "complex<f32>", "tuple<>",
              "dense<", "dense_resource<", "array<i64: ", "affine_map<(d0) -> (d0)>", "unit", "true", "false",
              "loc(", "#map", "!t", "{", "}", "[", "]", "(", ")", "<", ">", ",", ":", "=", "->", "x", "?", "%",
              "%0", "%arg0", "@f", "^bb0", "\"", "//", "{-#", "#-}", "0x", "\\", "\x00", "é", "\u202e", "\U0001F600"]


def _int64(value: int) -> int:
    """`value` wrapped into int64's range, as protobuf int fields need."""
    return (value + 2**63) % 2**64 - 2**63


def _choice_index(rng: random.Random, n: int) -> int:
    return rng.randrange(n) if n else 0


def mutate_text(rng: random.Random, text: str, *, words=(), others=()) -> str:
    """Token-level mutation of source text; `words` adds vocabulary, `others` are texts to splice from."""
    tokens = [(m.start(), m.end()) for m in _MLIR_TOKEN.finditer(text)]
    vocabulary = list(words) or MLIR_WORDS

    def span():
        if not tokens:
            return 0, 0
        i = rng.randrange(len(tokens))
        j = min(len(tokens) - 1, i + rng.choice([0, 0, 1, 2, 5, 20]))
        return tokens[i][0], tokens[j][1]

    def token():
        if not tokens:
            return 0, 0
        return tokens[rng.randrange(len(tokens))]

    kind = rng.randrange(14)
    if kind == 0:  # a number becomes an interesting one
        numbers = [t for t in tokens if _NUMBER.match(text[t[0]:t[1]])]
        if numbers:
            a, b = rng.choice(numbers)
            value = rng.choice(INTERESTING_INTS) if rng.random() < 0.7 else rng.choice(INTERESTING_FLOATS)
            return text[:a] + str(value) + text[b:]
    if kind == 1:  # a token becomes another token of the same text
        a, b = token()
        c, d = token()
        return text[:a] + text[c:d] + text[b:]
    if kind == 2:  # a token becomes a word of the vocabulary
        a, b = token()
        return text[:a] + rng.choice(vocabulary) + text[b:]
    if kind == 3:  # delete a span
        a, b = span()
        return text[:a] + text[b:]
    if kind == 4:  # duplicate a span somewhere
        a, b = span()
        at = token()[0]
        return text[:at] + text[a:b] + " " + text[at:]
    if kind == 5:  # swap two tokens
        (a, b), (c, d) = sorted([token(), token()])
        if b <= c:
            return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    if kind in (6, 7):  # delete, duplicate or swap lines
        lines = text.split("\n")
        i, j = _choice_index(rng, len(lines)), _choice_index(rng, len(lines))
        if kind == 6:
            del lines[i]
        elif rng.random() < 0.5:
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if kind == 8:  # insert a vocabulary word anywhere
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(vocabulary) + text[at:]
    if kind == 9:  # truncate
        return text[:rng.randrange(len(text) + 1)]
    if kind == 10 and others:  # splice lines of another input
        other = rng.choice(others).split("\n")
        lines = text.split("\n")
        i, k = _choice_index(rng, len(other)), rng.randrange(1, 6)
        at = _choice_index(rng, len(lines))
        return "\n".join(lines[:at] + other[i:i + k] + lines[at:])
    if kind == 11:  # deep nesting: recursion limits
        depth = rng.choice([50, 200, 1000, 5000])
        opener = rng.choice(["[", "(", "{", "tensor<", "<", "((d0", "dense<[", "array<"])
        closer = {"[": "]", "(": ")", "{": "}", "tensor<": ">", "<": ">", "((d0": ")", "dense<[": "]",
                  "array<": ">"}[opener]
        a, b = token()
        return text[:a] + opener * depth + text[a:b] + closer * (depth if rng.random() < 0.5 else 0) + text[b:]
    if kind == 12:  # a character flipped
        if text:
            at = rng.randrange(len(text))
            char = chr(rng.choice([0, 9, 10, 34, 35, 37, 60, 62, 92, 127, 0xE9, 0xD7FF, 0xFFFD]))
            return text[:at] + char + text[at + 1:]
    if kind == 13:  # a dimension list changes
        dims = [m.span() for m in re.finditer(r"(?<=<)(\d+x)+", text)]
        if dims:
            a, b = rng.choice(dims)
            new = "x".join(str(rng.choice(INTERESTING_INTS + [0, 1, 2])) for _ in range(rng.randrange(0, 6)))
            return text[:a] + (new + "x" if new else "") + text[b:]
    return text[::-1] if rng.random() < 0.01 else text + rng.choice(vocabulary)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Byte-level mutation: flips, overwritten integers (sizes and offsets), inserted and cut chunks."""
    data = bytearray(data)
    kind = rng.randrange(7)
    n = len(data)
    if kind == 0 and n:  # flip bits
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
    elif kind == 1 and n >= 4:  # an integer field gets an interesting value
        at = rng.randrange(n - 3)
        width = rng.choice([2, 4, 8])
        value = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
        data[at:at + width] = value.to_bytes(width, "little")[: n - at]
    elif kind == 2:  # truncate
        del data[rng.randrange(n + 1):]
    elif kind == 3 and n:  # delete a chunk
        at = rng.randrange(n)
        del data[at:at + rng.choice([1, 4, 16, 256])]
    elif kind == 4:  # insert a chunk
        at = rng.randrange(n + 1)
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 16])))
    elif kind == 5 and n:  # duplicate a chunk
        a = rng.randrange(n)
        chunk = data[a:a + rng.choice([4, 30, 100, 1000])]
        at = rng.randrange(n + 1)
        data[at:at] = chunk
    elif n:  # zero a chunk
        a = rng.randrange(n)
        k = rng.choice([1, 8, 64])
        data[a:a + k] = bytes(len(data[a:a + k]))
    return bytes(data)


# -- JSON (the .rtm manifest) ------------------------------------------------------------------------


def _json_paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _json_paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_paths(v, path + (i,))


def _interesting_json(rng: random.Random, old):
    options = [None, True, False, 0, -1, 1, 2**31, 2**63, -2**63, 10**30, 1.5, float("nan"), "", "x",
               "../../etc/passwd", "f32", "tensor<2x2xf32>", "tensor<4294967296x4294967296xf32>", [], {}, [0, 0, 0],
               ["const", 0, 8], ["arena", -8, 8], {"op": "barrier"}, "a" * 1000]
    if isinstance(old, bool):
        return not old
    if isinstance(old, int) and rng.random() < 0.6:
        return rng.choice([old + 1, old - 1, old * 2, -old, old + 64] + INTERESTING_INTS)
    if isinstance(old, str) and old and rng.random() < 0.5:
        return mutate_text(rng, old)
    return rng.choice(options)


def mutate_json(rng: random.Random, value):
    """One structural change somewhere in a JSON tree: a value replaced, a key dropped, a list item copied."""
    paths = list(_json_paths(value))[1:]
    if not paths:
        return value
    path = rng.choice(paths)
    *parent_path, key = path
    parent = value
    for k in parent_path:
        parent = parent[k]
    kind = rng.randrange(4)
    if kind == 0 and isinstance(parent, dict):
        del parent[key]
    elif kind == 1 and isinstance(parent, list):
        parent.insert(rng.randrange(len(parent) + 1), json.loads(json.dumps(parent[key])))
    elif kind == 2 and isinstance(parent, list):
        del parent[key]
    else:
        parent[key] = _interesting_json(rng, parent[key])
    return value


# -- .rtm modules -----------------------------------------------------------------------------------


def mutate_module(rng: random.Random, data: bytes, *, executable_words=()) -> bytes:
    """A mutated .rtm: raw bytes (zip structure, checksums), or its entries changed and re-sealed
    with correct sizes and checksums, so that the manifest and the executables' contents are reached."""
    from ...module_format import MANIFEST

    if rng.random() < 0.3:
        return mutate_bytes(rng, data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            entries = {name: zf.read(name) for name in zf.namelist()}
        manifest = json.loads(entries.pop(MANIFEST))
    except Exception:  # an earlier raw mutation broke the zip (zipfile fails in many ways): mutate its bytes
        return mutate_bytes(rng, data)
    what = rng.randrange(4)
    if what == 0:  # an executable's text
        names = [n for n in entries if n.startswith("executables/")]
        if names:
            name = rng.choice(names)
            text = entries[name].decode("utf-8", "replace")
            for _ in range(rng.randrange(1, 4)):
                text = mutate_text(rng, text, words=executable_words or MLIR_WORDS)
            entries[name] = text.encode("utf-8", "surrogatepass")
    elif what == 1 and entries:  # any entry's bytes
        name = rng.choice(sorted(entries))
        entries[name] = mutate_bytes(rng, entries[name])
    sealed = _sealed(manifest, entries)
    if what >= 2:  # the manifest itself, after sealing: so sizes and checksums can be wrong too
        for _ in range(rng.randrange(1, 4)):
            sealed = mutate_json(rng, sealed)
    return _zip(sealed, entries)


def _sealed(manifest: dict, entries: dict) -> dict:
    """The manifest with correct sizes and checksums for `entries`."""
    import hashlib

    manifest = json.loads(json.dumps(manifest))
    manifest["entries"] = {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in entries.items()}
    return manifest


def _zip(manifest, entries: dict) -> bytes:
    from ...module_format import MANIFEST, _write_aligned

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(MANIFEST, json.dumps(manifest))
        for name, data in entries.items():
            _write_aligned(zf, name, data)
    return buffer.getvalue()


# -- ONNX ----------------------------------------------------------------------------------------------


def mutate_onnx(rng: random.Random, data: bytes, *, op_types=()) -> bytes:
    """A mutated ONNX model: one to three changes to its graph (nodes, attributes, initializers,
    input and output types, the opset), or, now and then, to its serialized bytes."""
    import onnx

    if rng.random() < 0.1:
        return mutate_bytes(rng, data)
    model = onnx.ModelProto()
    model.ParseFromString(data)
    for _ in range(rng.randrange(1, 4)):
        _mutate_onnx_once(rng, model, op_types)
    return model.SerializeToString()


def _mutate_onnx_once(rng: random.Random, model, op_types) -> None:
    from onnx import AttributeProto

    g = model.graph
    nodes = list(g.node)
    kind = rng.randrange(13)
    if kind == 0 and nodes:  # op type
        node = rng.choice(nodes)
        node.op_type = rng.choice(list(op_types) or [n.op_type for n in nodes])
    elif kind == 1 and nodes:  # an input dropped, added or renamed
        node = rng.choice(nodes)
        names = [n for other in nodes for n in other.output] + [i.name for i in g.input] + ["", "nowhere"]
        if node.input and rng.random() < 0.4:
            del node.input[rng.randrange(len(node.input))]
        elif node.input and rng.random() < 0.5:
            node.input[rng.randrange(len(node.input))] = rng.choice(names)
        else:
            node.input.append(rng.choice(names))
    elif kind == 2 and nodes:  # a node dropped, copied or moved
        i = rng.randrange(len(nodes))
        copy = type(nodes[i])()
        copy.CopyFrom(nodes[i])
        del g.node[i]
        if rng.random() < 0.6:
            g.node.insert(rng.randrange(len(g.node) + 1), copy)
            if rng.random() < 0.5:
                g.node.insert(rng.randrange(len(g.node) + 1), copy)
    elif kind in (3, 4) and nodes:  # an attribute's value
        node = rng.choice(nodes)
        attrs = list(node.attribute)
        if not attrs:
            node.attribute.add(name=rng.choice(["axis", "perm", "group", "pads", "keepdims", "to"]),
                               type=AttributeProto.INT, i=_int64(rng.choice(INTERESTING_INTS)))
            return
        a = rng.choice(attrs)
        if a.type == AttributeProto.INT:
            a.i = _int64(rng.choice(INTERESTING_INTS + [-2, -3, 4, 5]))
        elif a.type == AttributeProto.INTS:
            values = list(a.ints)
            if values and rng.random() < 0.5:
                values[rng.randrange(len(values))] = _int64(rng.choice(INTERESTING_INTS + [-2, -3]))
            elif values and rng.random() < 0.5:
                del values[rng.randrange(len(values))]
            else:
                values.append(rng.choice([0, 1, 2, -1]))
            del a.ints[:]
            a.ints.extend(values)
        elif a.type == AttributeProto.FLOAT:
            a.f = float(rng.choice(["0", "-1", "1e38", "nan", "inf", "1e-45"]))
        elif a.type == AttributeProto.STRING:
            a.s = rng.choice([b"", b"NOTSET", b"SAME_UPPER", b"VALID", b"tanh", b"linear", b"\xff\xfe", b"x" * 100])
        elif a.type == AttributeProto.TENSOR:
            _mutate_tensor(rng, a.t)
        else:
            node.attribute.remove(a)
        if rng.random() < 0.2:  # the same name with another type
            a.type = rng.choice([AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.INTS, AttributeProto.STRING])
    elif kind == 5 and nodes:  # an attribute dropped
        node = rng.choice(nodes)
        if node.attribute:
            del node.attribute[rng.randrange(len(node.attribute))]
    elif kind in (6, 7) and g.initializer:  # an initializer's shape, type or data
        _mutate_tensor(rng, rng.choice(list(g.initializer)))
    elif kind == 8 and (g.input or g.output):  # a graph input's or output's type
        info = rng.choice(list(g.input) + list(g.output))
        tt = info.type.tensor_type
        if rng.random() < 0.4:
            tt.elem_type = rng.choice([0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 14, 16, 17, 21, 99])
        elif tt.shape.dim:
            d = tt.shape.dim[rng.randrange(len(tt.shape.dim))]
            if rng.random() < 0.3:
                d.dim_param = "N"
            else:
                d.dim_value = rng.choice([0, 1, 2, 3, 1000, 2**31, 2**40, -1])
        else:
            tt.ClearField("shape")
    elif kind == 9:  # the opset
        for o in model.opset_import:
            o.version = rng.choice([1, 7, 12, 13, 17, 18, 21, 22, 99, 2**40])
            if rng.random() < 0.1:
                o.domain = "com.example"
    elif kind == 10 and g.output:  # outputs dropped or pointing elsewhere
        out = rng.choice(list(g.output))
        names = [n for node in nodes for n in node.output] + ["nowhere", ""]
        out.name = rng.choice(names)
    elif kind == 11 and nodes:  # an output of a node renamed: SSA violations and shadowing
        node = rng.choice(nodes)
        if node.output:
            names = [n for other in nodes for n in other.output] + [i.name for i in g.input] + ["", "fresh"]
            node.output[rng.randrange(len(node.output))] = rng.choice(names)
    elif kind == 12 and g.input:  # an input dropped
        del g.input[rng.randrange(len(g.input))]


def _mutate_tensor(rng: random.Random, t) -> None:
    choice = rng.randrange(5)
    if choice == 0 and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice([0, 1, 2, 3, 7, 1000, 2**31, 2**40, -1, -2**63])
    elif choice == 1:
        t.data_type = rng.choice([0, 1, 2, 3, 6, 7, 9, 10, 11, 13, 16, 8, 17, 22, 99])
    elif choice == 2 and t.raw_data:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)]
    elif choice == 3:
        t.dims.append(rng.choice([1, 2, 0]))
    elif t.dims:
        del t.dims[rng.randrange(len(t.dims))]
