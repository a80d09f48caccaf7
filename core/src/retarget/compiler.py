"""The compile pipeline: import, graph passes, dispatches, per-target code, module.

    source -> graph IR -> simplify -> dispatches -> executables (one per target)
           -> host programs + constant pool -> Artifact (.rtm)

`--dump-after-all DIR` writes every stage as text, numbered in order.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from . import __version__, ir
from .errors import RetargetError, UnknownTargetError, suggestion
from .ir.core import Module
from .ir.symbolic import dims_to_json
from .module_format import CONSTANTS, FORMAT, FORMAT_VERSION, Artifact
from .passes.conv_folding import fold_conv_scales
from .passes.dispatch import form_dispatches
from .passes.dynamic_plan import apply_dims, format_dynamic_program, is_dynamic, plan_dynamic_function
from .passes.host_program import ConstantPool, format_program, plan_function
from .passes.simplify import canonicalize, fold_constants
from .plugin_manager import manager
from .protocols import TargetDesc

GRAPH_PASSES: list[tuple[str, Callable[[Module], Module]]] = [
    ("canonicalize", canonicalize),
    ("fold-constants", fold_constants),
    ("fold-conv-scales", fold_conv_scales),
    ("canonicalize", canonicalize),
]


def resolve_target(spec: str | TargetDesc) -> tuple[object, TargetDesc, str | None]:
    """`backend[:arch]` -> (backend, TargetDesc, note). A missing arch uses the
    backend's default, with a one-line note saying which. A TargetDesc (from a
    backend's `parse`, `default` or `describe`) is used as it is."""
    backends = manager().by_name("retarget_targets")
    if isinstance(spec, TargetDesc):
        if spec.backend not in backends:
            raise UnknownTargetError(f"no installed target backend '{spec.backend}' for {spec.name}",
                                     hint=suggestion(spec.backend, backends))
        return backends[spec.backend], spec, None
    name, _, arch = spec.partition(":")
    backend = backends.get(name)
    if backend is None:
        raise UnknownTargetError(
            f"unknown target '{spec}'",
            hint=suggestion(name, backends) + " (`retarget targets` lists them; a backend may need its plugin installed)",
        )
    if arch:
        return backend, backend.parse(arch), None
    desc, note = backend.default()
    return backend, desc, note


def import_model(source, **options) -> Module:
    if isinstance(source, Module):
        return source
    importers = manager().by_name("retarget_importers")
    if isinstance(source, (str, Path)) and not Path(source).exists():
        raise RetargetError(f"{source}: no such file", hint="check the path")
    for importer in importers.values():
        if importer.accepts(source):
            return importer.load(source, **options)
    known = ", ".join(f"{i.name} ({' '.join(i.suffixes)})" for i in importers.values())
    what = f"'{source}'" if isinstance(source, (str, Path)) else f"a {type(source).__name__}"
    raise RetargetError(f"no importer accepts {what}", hint=f"installed importers: {known}")


def compile(  # noqa: A001 - the public verb
    source,
    target: str | TargetDesc | list = "vmvx",
    *,
    dump_dir: str | Path | None = None,
    notes: Callable[[str], None] | None = None,
    dims: dict | None = None,
    **import_options,
) -> Artifact:
    """`dims` bounds the model's symbolic dimensions ({"batch": (1, 64)}, or "1..64"; a number fixes
    one): bounded symbols get one memory plan, sized at the bounds (see passes/dynamic_plan.py)."""
    targets = [target] if isinstance(target, (str, TargetDesc)) else list(target)
    if not targets:
        raise UnknownTargetError("no target given", hint="pass --target, e.g. --target vmvx")
    resolved = [resolve_target(t) for t in targets]  # fail on a bad name before any work
    for _, _, note in resolved:
        if note and notes:
            notes(note)
    dump = _Dumper(dump_dir)

    module = apply_dims(import_model(source, **import_options), dims)
    ir.verify(module)
    dump("import", ir.print_module(module, elide_constants=True))
    for name, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
        ir.verify(module)
        dump(name, ir.print_module(module, elide_constants=True))

    dispatches = {fn.name: form_dispatches(fn) for fn in module.functions.values()}
    kernels = [d.function for ds in dispatches.values() for d in ds]
    entry_index = {k.name: i for i, k in enumerate(kernels)}
    dump("dispatches", ir.print_module(Module({k.name: k for k in kernels}), elide_constants=True))

    pool = ConstantPool()
    functions = {}
    for fn in module.functions.values():
        if is_dynamic(fn):
            functions[fn.name] = plan_dynamic_function(fn, dispatches[fn.name], entry_index, pool)
            dump(f"host-program-{fn.name}", format_dynamic_program(fn.name, functions[fn.name]))
            continue
        functions[fn.name] = plan_function(fn, dispatches[fn.name], entry_index, pool)
        dump(f"host-program-{fn.name}", format_program(fn.name, functions[fn.name]))

    entries = {CONSTANTS: pool.blob()}
    executables = []
    for backend, desc, _ in resolved:
        binary = backend.compile(kernels, desc)
        path = f"executables/{desc.backend}-{desc.arch}.bin"
        entries[path] = binary.data
        dump(f"executable-{desc.backend}-{desc.arch}", binary.listing or _preview(binary.data))
        executables.append({
            "backend": desc.backend,
            "arch": desc.arch,
            "format": binary.format,
            "path": path,
            "target": _desc_json(binary.target),
            "entry_points": [_entry_json(e) for e in binary.entry_points],
        })

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "producer": {
            "retarget": __version__,
            "plugins": {r.name: r.version for r in manager().records.values() if r.ok},
            "python": platform.python_version(),
        },
        "source": str(source) if isinstance(source, (str, Path)) else type(source).__name__,
        "functions": functions,
        "executables": executables,
        "constants": {"path": CONSTANTS, "size": pool.size, "items": pool.items},
    }
    return Artifact(manifest, entries)


def _desc_json(desc: TargetDesc) -> dict:
    return asdict(desc)


def desc_from_json(data: dict) -> TargetDesc:
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return TargetDesc(**fields)


def _entry_json(e) -> dict:
    out = {
        "name": e.name,
        "bindings": [{"type": str(b.type), "access": b.access} for b in e.bindings],
        "workgroup_size": list(e.workgroup_size),
        "workgroup_count": list(e.workgroup_count),
    }
    if e.scalars:  # a dynamic entry point: its sizes as dimensions of its scalars
        out["scalars"] = list(e.scalars)
        out["workgroup_count"] = dims_to_json(e.workgroup_count)
        for b, data in zip(e.bindings, out["bindings"]):
            data["shape"] = dims_to_json(b.type.shape)
    return out


def _preview(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return f"<{len(data)} bytes of binary code>"


class _Dumper:
    def __init__(self, directory):
        self.directory = Path(directory) if directory else None
        self.count = 0
        if self.directory:
            self.directory.mkdir(parents=True, exist_ok=True)

    def __call__(self, stage: str, text: str):
        if self.directory is None:
            return
        self.count += 1
        suffix = ".txt" if stage.startswith("executable") and not text.startswith("module") else ".mlir"
        (self.directory / f"{self.count:02d}-{stage}{suffix}").write_text(text)
