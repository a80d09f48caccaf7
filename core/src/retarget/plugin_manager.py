"""The plugin manager: load entry points one at a time, isolate the broken ones.

Thin on purpose: entry-point discovery, the API version check, a pluggy manager,
and calling each hook one plugin at a time so that one failure stays local.
"""

from __future__ import annotations

import importlib.metadata as md
import threading
import traceback
from dataclasses import dataclass, field

import pluggy

from . import hookspecs
from .errors import PluginError, closest

GROUP = "retarget.plugins"
HOOKS = ("retarget_targets", "retarget_drivers", "retarget_importers", "retarget_executable_loaders")


@dataclass
class PluginRecord:
    name: str
    distribution: str = ""
    version: str = ""
    module: str = ""
    hooks: list[str] = field(default_factory=list)
    error: str | None = None  # one line; None when the plugin works
    traceback: str | None = None
    notes: list[str] = field(default_factory=list)  # e.g. a contribution shadowed by another plugin
    failed_hooks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "hooks": self.hooks,
            "status": "ok" if self.ok else "broken",
            "error": self.error,
            "traceback": self.traceback,
            "notes": self.notes,
        }


class PluginManager:
    def __init__(self):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self._cache: dict[str, dict] = {}

    # -- loading ------------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        for ep in sorted(md.entry_points(group=GROUP), key=lambda e: (e.name != "builtin", e.name)):
            if ep.name in self.records:
                continue
            dist = ep.dist
            record = PluginRecord(ep.name, dist.name if dist else "", dist.version if dist else "", ep.value)
            self.records[ep.name] = record
            try:
                plugin = ep.load()
            except BaseException as e:  # noqa: BLE001 - a plugin may raise anything, even SystemExit
                self._broken(record, f"failed to import {ep.value}: {type(e).__name__}: {e}", e)
                continue
            self._register(record, plugin)
        if "builtin" not in self.records:  # running from a source tree without install metadata
            from . import builtin

            record = PluginRecord("builtin", "retarget", _own_version(), "retarget.builtin")
            self.records["builtin"] = record
            self._register(record, builtin)

    def register(self, plugin, name: str) -> PluginRecord:
        """Register an in-process plugin object (used by tests and embedders)."""
        record = PluginRecord(name, module=getattr(plugin, "__name__", type(plugin).__name__))
        self.records[name] = record
        self._register(record, plugin)
        self._cache.clear()
        return record

    def _register(self, record: PluginRecord, plugin) -> None:
        api = getattr(plugin, "RETARGET_PLUGIN_API", None)
        if api != hookspecs.API_VERSION:
            got = "does not declare RETARGET_PLUGIN_API" if api is None else f"was written for plugin API {api}"
            record.error = f"{got}; this retarget speaks plugin API {hookspecs.API_VERSION}"
            record.notes.append(f"upgrade {record.distribution or record.name} to a release for retarget {_own_version()}")
            return
        try:
            self.pm.register(plugin, name=record.name)
        except Exception as e:  # pluggy rejects bad signatures of known hooks
            self._broken(record, f"rejected by the plugin manager: {e}", e)
            return
        callers = self.pm.get_hookcallers(plugin) or []
        # pluggy accepts a hook name that no spec declares and never calls it; a typo would go unnoticed.
        unknown = [c.name for c in callers if not c.has_spec()
                   and not all(i.optionalhook for i in c.get_hookimpls() if i.plugin is plugin)]
        if unknown:
            self.pm.unregister(plugin)
            guesses = [hit for name in unknown for hit in closest(name, HOOKS, n=1)]
            hint = f"did you mean {', '.join(guesses)}? " if guesses else ""
            record.error = (f"implements {', '.join(unknown)}, which plugin API {hookspecs.API_VERSION} does not "
                            f"have ({hint}a hook of a newer API is marked @hookimpl(optionalhook=True))")
            return
        record.hooks = sorted(c.name for c in callers if c.has_spec())

    def _broken(self, record: PluginRecord, message: str, exc: BaseException) -> None:
        line = message.splitlines()[0] if message else type(exc).__name__
        record.error = f"{record.error}; {line}" if record.error else line
        record.traceback = "".join(traceback.format_exception(exc))

    # -- calling hooks --------------------------------------------------------------------------
    def call_every_hook(self) -> None:
        """Call each hook once (results are cached), so that a plugin whose hook raises shows as broken."""
        for hook in HOOKS:
            self.by_name(hook)

    def collect(self, hook: str) -> list[tuple[str, object]]:
        """(plugin name, contribution) for every contribution to `hook`, in hook order.

        A plugin whose hook raises is marked broken, and that hook of it is skipped from then on."""
        out = []
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):  # pluggy calls last-registered first
            record = self.records.get(impl.plugin_name)
            if record is not None and hook in record.failed_hooks:
                continue
            try:
                items = impl.function() or []
                out.extend((impl.plugin_name, item) for item in items)
            except Exception as e:  # the plugin is broken; its other hooks still count
                if record is not None:
                    record.failed_hooks.append(hook)
                    self._broken(record, f"{hook} raised {type(e).__name__}: {e}", e)
        return out

    def by_name(self, hook: str) -> dict[str, object]:
        """Contributions of `hook` keyed by their `name` (`format` for loaders); the first wins."""
        if hook not in self._cache:
            key = "format" if hook == "retarget_executable_loaders" else "name"
            table: dict[str, object] = {}
            for plugin_name, item in self.collect(hook):
                name = getattr(item, key, None)
                if not isinstance(name, str):
                    self._broken(self.records[plugin_name], f"{hook} returned {item!r} without a '{key}'",
                                 PluginError("bad contribution"))
                    continue
                if name in table:
                    self.records[plugin_name].notes.append(f"{hook}: '{name}' is shadowed by an earlier plugin")
                    continue
                table[name] = item
            self._cache[hook] = table
        return self._cache[hook]


def _own_version() -> str:
    from . import __version__

    return __version__


_manager: PluginManager | None = None
_lock = threading.Lock()


def manager() -> PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _manager
    with _lock:
        if _manager is None:
            pm = PluginManager()
            pm.load_entry_points()
            _manager = pm
    return _manager


def reset() -> None:
    """Forget loaded plugins (tests install plugins at run time)."""
    global _manager
    with _lock:
        _manager = None
