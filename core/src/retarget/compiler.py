"""The compile pipeline: import, graph passes, placement, dispatches, per-target code, module.

    source -> graph IR -> simplify -> placement -> dispatches -> executables (one per target)
           -> host programs + constant pool -> Artifact (.rtm)

Placement (`passes/placement.py`) puts each op on the `target`s, or on the `fallback` where a
target's support table refuses it. A module whose ops all run on one placement is written as
always (format 1); one split across placements (format 2) holds each placement's executables,
constants and arena, and per function a host program of segments and transfers.

`--dump-after-all DIR` writes every stage as text, numbered in order.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import platform
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from . import __version__, ir
from .errors import RetargetError, UnknownTargetError, UnsupportedOpError, suggestion
from .ir.core import Module
from .ir.symbolic import dims_to_json
from .module_format import CONSTANTS, FORMAT, FORMAT_VERSION, FORMAT_VERSION_SINGLE, Artifact
from .passes import placement as placing
from .passes.conv_folding import fold_conv_scales
from .passes.dynamic_plan import apply_dims, format_dynamic_program, is_dynamic, plan_dynamic_function
from .passes.host_program import ConstantPool, format_program, plan_function, plan_partitioned_function
from .passes.precision import precision_dtype, set_precision
from .passes.quantize import quantize_weights, scheme
from .passes.simplify import canonicalize, fold_constants, narrow_index_constants
from .passes.stages import has_host_ops, split_stages
from .plugin_manager import manager
from .protocols import SupportTable, TargetDesc

HOST_DRIVERS = ("local-task", "local-sync")  # a placement whose targets run only on these is named "cpu"

GRAPH_PASSES: list[tuple[str, Callable[[Module], Module]]] = [
    ("canonicalize", canonicalize),
    ("fold-constants", fold_constants),
    ("narrow-index-constants", narrow_index_constants),
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
            hint=suggestion(name, backends)
            + " (`retarget targets` lists them; a backend may need its plugin installed)",
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


_gc_lock = threading.Lock()
_gc_pauses = [0, False]  # compiles in progress; whether the first of them found the collector on


@contextlib.contextmanager
def _collector_paused():
    """No cyclic garbage collection while compiling: code generation makes hundreds of thousands of short-lived
    objects, and each full collection walks every object of the process (0.25 s with torch loaded; 0.7-0.9 s of
    a ResNet-18 compile for llvm-cpu). Garbage with cycles waits for the next collection after the compile."""
    with _gc_lock:
        if _gc_pauses[0] == 0:
            _gc_pauses[1] = gc.isenabled()
            gc.disable()
        _gc_pauses[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses[0] -= 1
            if _gc_pauses[0] == 0 and _gc_pauses[1]:
                gc.enable()


@_collector_paused()
def compile(  # noqa: A001 - the public verb
    source,
    target: str | TargetDesc | list = "vmvx",
    *,
    fallback: str | TargetDesc | list | None = None,
    refuse: list[str] | None = None,
    dump_dir: str | Path | None = None,
    notes: Callable[[str], None] | None = None,
    precision: str | None = None,
    interface_precision: str | None = None,
    quantize: str | None = None,
    dims: dict | None = None,
    **import_options,
) -> Artifact:
    """Compile `source` for `target` (one or a list: variants of the same code, the device picks one).

    `fallback` (one target or a list) runs what a target refuses: the module is then split between
    the two placements, with transfers between them (`retarget.load(..., devices=...)`). Without
    it, an op the target refuses is a PlacementError naming it. `refuse` adds refusals to the
    targets' support tables (op names such as `rt.erf`, `rt.exp:i64`, or element types such as
    `i64`), to exercise the fallback. The returned Artifact's `placement` is the report that
    `--explain` prints (`passes.placement.explain_text`).

    `precision` is the float type kernels compute in (f32, f16, bf16; sums accumulate in f32; default: the
    model's own types); `interface_precision` the float type of the functions' arguments and results (default:
    the model's); `quantize` a weight quantization scheme (`passes.quantize.SCHEMES`: int8, int4-g32,
    8da4w-g32, ...).

    `dims` bounds the model's symbolic dimensions ({"batch": (1, 64)}, or "1..64"; a number fixes one):
    bounded symbols get one memory plan, sized at the bounds (see passes/dynamic_plan.py)."""
    compute = precision_dtype(precision) if precision else None
    interface = precision_dtype(interface_precision, "interface precision") if interface_precision else None
    quant = scheme(quantize) if quantize else None
    targets = [target] if isinstance(target, (str, TargetDesc)) else list(target)
    fallbacks = [] if fallback is None else [fallback] if isinstance(fallback, (str, TargetDesc)) else list(fallback)
    if not targets:
        raise UnknownTargetError("no target given", hint="pass --target, e.g. --target vmvx")
    refuse = list(refuse or [])
    placing.check_refusal_names(refuse)
    resolved = [resolve_target(t) for t in targets]  # fail on a bad name before any work
    resolved_fallback = [resolve_target(t) for t in fallbacks]
    for _, _, note in resolved + resolved_fallback:
        if note and notes:
            notes(note)
    dump = _Dumper(dump_dir)

    module = import_model(source, dims=dims, **import_options)  # an importer that can, ranges its symbols at once
    if module is source:  # the passes rewrite the module in place: the caller's stays as it was
        module = copy.deepcopy(module)
    module = apply_dims(module, dims, notes)
    ir.verify(module)
    dump("import", lambda: ir.print_module(module, elide_constants=True))
    for name, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
        ir.verify(module)
        dump(name, lambda m=module: ir.print_module(m, elide_constants=True))
    if quant is not None:
        module, summary = quantize_weights(module, quant)
        if notes:
            notes(summary)
        ir.verify(module)
        dump(f"quantize-{quant.name}", lambda m=module: ir.print_module(m, elide_constants=True))
    if compute is not None or interface is not None:
        module = set_precision(module, compute, interface)
        ir.verify(module)
        dump(f"precision-{(compute or interface).name}", lambda m=module: ir.print_module(m, elide_constants=True))

    staged_from = {name: fn for name, fn in module.functions.items() if has_host_ops(fn)}
    staged = {}
    if staged_from:  # sizes that depend on the data: stages, with host ops between them (passes/stages.py)
        module, staged = split_stages(module, _graph_passes)
        ir.verify(module)
        dump("stages", lambda m=module: ir.print_module(m, elide_constants=True))

    names = _placement_names(resolved, resolved_fallback)
    primary = placing.Side(names[0], {d.name: placing.with_user_refusals(support_table(b, d), refuse)
                                      for b, d, _ in resolved})
    secondary = placing.Side(names[1], {d.name: support_table(b, d) for b, d, _ in resolved_fallback}) \
        if resolved_fallback else None
    placements = {fn.name: placing.place_function(fn, primary, secondary) for fn in module.functions.values()}
    sides = {primary.name: list(primary.tables), **({secondary.name: list(secondary.tables)} if secondary else {})}
    dump("placement", lambda: placing.explain_text(placing.report(placements, sides)))
    placing.check(placements, sides, bool(resolved_fallback))
    all_sides = [primary, *([secondary] if secondary else [])]
    for fp in placements.values():
        placing.check_constant_ranges(fp, all_sides)

    used = {fp.dispatch_placement(d) for fp in placements.values() for d in fp.dispatches}
    if secondary is not None and notes:
        if secondary.name not in used:
            notes(f"the fallback ({', '.join(secondary.tables)}) is not needed: the targets run every op")
        elif primary.name not in used:
            notes(f"every op runs on the fallback ({', '.join(secondary.tables)}); the module holds only its code")
    if len(used) > 1 and staged:
        raise UnsupportedOpError(f"function {', '.join(staged)} has sizes that depend on the data (it runs as stages "
                                 "with host ops between them), and a module split by --fallback runs static "
                                 "functions only", hint="leave out --fallback, and compile for a target that runs "
                                 "every op (--explain shows which one refuses what)")
    if len(used) > 1:
        artifact = _partitioned(source, placements, {primary.name: resolved, secondary.name: resolved_fallback},
                                [p for p in names if p in used], dump)
    else:
        only = resolved_fallback if used == {getattr(secondary, "name", None)} else resolved
        artifact = _single(source, placements, only, dump)
    artifact.placement = placing.report(placements, sides, artifact.functions)
    _record_input_ranges(artifact, placements, all_sides)
    if staged:
        artifact.manifest["staged"] = {name: {**_signature_json(staged_from[name]), **chain}
                                       for name, chain in staged.items()}
    return artifact


def _graph_passes(module: Module) -> Module:
    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    return module


def _signature_json(fn) -> dict:
    """A staged function's arguments and results as its callers see them, and its symbols' ranges."""
    names = fn.arg_names or [f"arg{i}" for i in range(len(fn.args))]
    return {"inputs": [{"name": n, "type": str(a.type), "shape": dims_to_json(a.type.shape)}
                       for n, a in zip(names, fn.args)],
            "outputs": [{"type": str(v.type), "shape": dims_to_json(v.type.shape)} for v in fn.returns],
            "symbols": {s: str(r) for s, r in fn.symbols.items()}}


def _record_input_ranges(artifact: Artifact, placements: dict, sides: list) -> None:
    """Each input of a type that a target of its function holds only within a range gets `range`: [lo, hi, why],
    which the runtime checks at each call (`SupportTable.ranges`)."""
    for name, fp in placements.items():
        ranges = placing.value_ranges(fp, sides)
        for arg, meta in zip(fp.function.args, artifact.manifest["functions"][name]["inputs"]):
            if arg.type.dtype.name in ranges:
                meta["range"] = list(ranges[arg.type.dtype.name])


def support_table(backend, desc: TargetDesc) -> SupportTable:
    """The backend's support table for `desc`; a backend without `support` refuses nothing."""
    support = getattr(backend, "support", None)
    table = support(desc) if support is not None else SupportTable()
    if not isinstance(table, SupportTable):
        raise RetargetError(f"target {backend.name}: support() returned {type(table).__name__}, not a SupportTable",
                            hint="a plugin bug: report it to the plugin's authors")
    return table


def _placement_names(resolved, resolved_fallback) -> list[str]:
    """"gpu" or "cpu" by where each side's targets run (the fallback gets "-fallback" when both agree)."""

    def kind(side) -> str:
        return "cpu" if side and all(set(b.drivers) <= set(HOST_DRIVERS) for b, _, _ in side) else "gpu"

    first, second = kind(resolved), kind(resolved_fallback)
    return [first, second if second != first else f"{second}-fallback"]


def _single(source, placements: dict, resolved: list, dump) -> Artifact:
    """A module for one placement: format 1, as every module was before placements."""
    dispatches = {name: fp.dispatches for name, fp in placements.items()}
    kernels = [d.function for ds in dispatches.values() for d in ds]
    entry_index = {k.name: i for i, k in enumerate(kernels)}
    dump("dispatches", lambda: ir.print_module(Module({k.name: k for k in kernels}), elide_constants=True))

    pool = ConstantPool()
    functions = {}
    for name, fp in placements.items():
        if is_dynamic(fp.function):
            functions[name] = plan_dynamic_function(fp.function, dispatches[name], entry_index, pool)
            dump(f"host-program-{name}", format_dynamic_program(name, functions[name]))
            continue
        functions[name] = plan_function(fp.function, dispatches[name], entry_index, pool)
        dump(f"host-program-{name}", format_program(name, functions[name]))

    entries = {CONSTANTS: pool.blob()}
    executables = [_executable(backend, desc, kernels, f"executables/{desc.backend}-{desc.arch}.bin", entries, dump)
                   for backend, desc, _ in resolved]
    return Artifact(_manifest(source, FORMAT_VERSION_SINGLE, functions, executables,
                              {"path": CONSTANTS, "size": pool.size, "items": pool.items}), entries)


def _partitioned(source, placements: dict, sides: dict[str, list], order: list[str], dump) -> Artifact:
    """A module split across placements: format 2."""
    dynamic = [name for name, fp in placements.items() if is_dynamic(fp.function)]
    if dynamic:
        raise UnsupportedOpError(f"function {', '.join(dynamic)} has sizes known only at run time, and a split module "
                                 "(placement with --fallback) runs static functions only",
                                 hint="fix each symbolic dimension with --dim NAME=SIZE, or leave out --fallback")
    kernels: dict[str, list] = {p: [] for p in order}
    placement_of = {}
    for fp in placements.values():
        for d in fp.dispatches:
            placement_of[d] = fp.dispatch_placement(d)
            kernels[placement_of[d]].append(d.function)
    dump("dispatches", lambda: ir.print_module(Module({k.name: k for ks in kernels.values() for k in ks}),
                                       elide_constants=True))
    entry_index = {p: {k.name: i for i, k in enumerate(ks)} for p, ks in kernels.items()}
    pools = {p: ConstantPool() for p in order}
    schedule_order = sorted(order, key=lambda p: p.startswith("cpu"))  # devices that run asynchronously first
    functions = {}
    for name, fp in placements.items():
        functions[name] = plan_partitioned_function(fp.function, fp.dispatches, placement_of, entry_index, pools,
                                                    schedule_order)
        dump(f"host-program-{name}", format_program(name, functions[name]))

    blob, items, placement_meta, offset = [], [], {}, 0
    for p in order:
        blob.append(pools[p].blob())
        items += [{**item, "offset": offset + item["offset"], "placement": p} for item in pools[p].items]
        placement_meta[p] = {"targets": [d.name for _, d, _ in sides[p]], "constants": [offset, pools[p].size]}
        offset += pools[p].size
    entries = {CONSTANTS: b"".join(blob)}
    executables = []
    for p in order:
        for backend, desc, _ in sides[p]:
            exe = _executable(backend, desc, kernels[p], f"executables/{p}-{desc.backend}-{desc.arch}.bin", entries,
                              dump, prefix=f"{p}-")
            executables.append({**exe, "placement": p})
    manifest = _manifest(source, FORMAT_VERSION, functions, executables,
                         {"path": CONSTANTS, "size": offset, "items": items})
    manifest["placements"] = placement_meta
    return Artifact(manifest, entries)


def _executable(backend, desc: TargetDesc, kernels: list, path: str, entries: dict, dump, prefix: str = "") -> dict:
    binary = backend.compile(kernels, desc)
    entries[path] = binary.data
    dump(f"executable-{prefix}{desc.backend}-{desc.arch}", binary.listing or _preview(binary.data))
    return {
        "backend": desc.backend,
        "arch": desc.arch,
        "format": binary.format,
        "path": path,
        "target": _desc_json(binary.target),
        "entry_points": [_entry_json(e) for e in binary.entry_points],
    }


def _manifest(source, version: int, functions: dict, executables: list, constants: dict) -> dict:
    return {
        "format": FORMAT,
        "format_version": version,
        "producer": {
            "retarget": __version__,
            "plugins": {r.name: r.version for r in manager().records.values() if r.ok},
            "python": platform.python_version(),
        },
        "source": str(source) if isinstance(source, (str, Path)) else type(source).__name__,
        "functions": functions,
        "executables": executables,
        "constants": constants,
    }


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

    def __call__(self, stage: str, text):
        """`text`, or a function that makes it: printing a large module costs more than compiling it."""
        if self.directory is None:
            return
        text = text() if callable(text) else text
        self.count += 1
        suffix = ".txt" if stage.startswith("executable") and not text.startswith("module") else ".mlir"
        (self.directory / f"{self.count:02d}-{stage}{suffix}").write_text(text)
