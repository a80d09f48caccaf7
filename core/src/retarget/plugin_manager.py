"""The plugin manager: load entry points one at a time, isolate the broken ones.

Thin on purpose: entry-point discovery, the API version check, a pluggy manager,
and calling each hook one plugin at a time so that one failure stays local.
"""

from __future__ import annotations

import importlib.metadata as md
import inspect
import threading
import traceback
from dataclasses import dataclass, field

import pluggy

from . import hookspecs
from .errors import closest

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
    fix: str | None = None  # one line: what to do about the error, for the plugin's author or its user
    traceback: str | None = None  # None when no exception was raised (a contract broken without one)
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
            "fix": self.fix,
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
                self._broken(record, f"failed to import {ep.value}: {type(e).__name__}: {e}", e,
                             fix=f"`retarget plugins --json` shows the traceback; install what {ep.value} imports, "
                                 f"or reinstall {record.distribution or ep.name}")
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
        if not self._speaks_this_api(record, plugin):
            return
        try:
            self.pm.register(plugin, name=record.name)
        except Exception as e:  # pluggy rejects bad signatures of known hooks
            self._broken(record, f"rejected by the plugin manager: {e}", e,
                         fix="every hook takes no argument (docs/plugins.md, The hooks)")
            return
        callers = self.pm.get_hookcallers(plugin) or []
        where = record.module or record.name
        # pluggy accepts a hook name that no spec declares and never calls it; a typo would go unnoticed.
        unknown = [c.name for c in callers if not c.has_spec()
                   and not all(i.optionalhook for i in c.get_hookimpls() if i.plugin is plugin)]
        if unknown:
            self.pm.unregister(plugin)
            guesses = [hit for name in unknown for hit in closest(name, HOOKS, n=1)]
            known = f"did you mean {', '.join(guesses)}?" if guesses else f"its hooks: {', '.join(HOOKS)}"
            record.error = (f"implements {', '.join(unknown)}, which plugin API {hookspecs.API_VERSION} "
                            f"does not have ({known})")
            record.fix = (f"rename it in {where}; a hook of a newer plugin API, which this retarget may lack, "
                          "is marked @hookimpl(optionalhook=True)")
            return
        # pluggy also ignores a function named like a hook but not decorated: the plugin would contribute nothing.
        hooked = {c.name for c in callers}
        bare = [h for h in HOOKS if h not in hooked and callable(getattr(plugin, h, None))]
        if bare:
            self.pm.unregister(plugin)
            record.error = f"defines {', '.join(bare)} without @hookimpl, so retarget never calls it"
            record.fix = f"decorate it in {where}: `from retarget.hookspecs import hookimpl`, then `@hookimpl` above it"
            return
        record.hooks = sorted(c.name for c in callers if c.has_spec())
        if not record.hooks:
            record.notes.append("implements no hook, so it contributes nothing (a hook is a function of "
                                "the plugin's module decorated with @hookimpl; docs/plugins.md, The hooks)")

    def _speaks_this_api(self, record: PluginRecord, plugin) -> bool:
        """RETARGET_PLUGIN_API must be the integer this core speaks; otherwise the record says who must change."""
        api = getattr(plugin, "RETARGET_PLUGIN_API", None)
        want = hookspecs.API_VERSION
        if type(api) is int and api == want:
            return True
        where, dist = record.module or record.name, record.distribution or record.name
        if api is None:
            record.error = "does not declare RETARGET_PLUGIN_API, the plugin API it is written for"
            record.fix = (f"add `RETARGET_PLUGIN_API = {want}` to {where}, if it is written for this plugin API "
                          "(docs/plugins.md, Versions and compatibility)")
        elif type(api) is not int:
            record.error = f"declares RETARGET_PLUGIN_API = {api!r}, a {type(api).__name__}; it must be an integer"
            record.fix = f"write `RETARGET_PLUGIN_API = {want}` in {where}"
        elif api < want:
            record.error = f"was written for plugin API {api}; this retarget speaks plugin API {want}"
            record.fix = (f"upgrade {dist} to a release for plugin API {want}, "
                          f"or use a retarget that speaks plugin API {api}")
        else:
            record.error = f"was written for plugin API {api}; this retarget speaks plugin API {want}"
            record.fix = (f"upgrade retarget (this is {_own_version()}) to a release that speaks plugin API {api}, "
                          f"or install a release of {dist} written for plugin API {want}")
        return False

    def _broken(self, record: PluginRecord, message: str, exc: BaseException | None = None, *, fix: str) -> None:
        line = message.splitlines()[0] if message else type(exc).__name__
        record.error = f"{record.error}; {line}" if record.error else line
        record.fix = f"{record.fix}; {fix}" if record.fix else fix
        if exc is not None:
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
                    self._broken(record, f"{hook} raised {type(e).__name__}: {e}", e,
                                 fix=f"`retarget plugins --json` shows the traceback; fix {hook} of "
                                     f"{record.module or record.name}, or ask its author")
        return out

    def by_name(self, hook: str) -> dict[str, object]:
        """Contributions of `hook` keyed by their `name` (`format` for loaders); the first wins."""
        if hook not in self._cache:
            key = "format" if hook == "retarget_executable_loaders" else "name"
            table: dict[str, object] = {}
            for plugin_name, item in self.collect(hook):
                name = getattr(item, key, None)
                if isinstance(item, type):  # a class has its methods too, but unbound: calls would fail later
                    self._broken(self.records[plugin_name],
                                 f"{hook} returned the class {item.__name__}, not an instance of it "
                                 f"({self._where(plugin_name, hook)})", fix=f"return {item.__name__}() instead")
                    continue
                if not isinstance(name, str):
                    self._broken(self.records[plugin_name],
                                 f"{hook} returned {item!r} without a '{key}' ({self._where(plugin_name, hook)})",
                                 fix=f"give every object that {hook} returns a `{key}` attribute, a string")
                    continue
                if name in table:
                    self.records[plugin_name].notes.append(f"{hook}: '{name}' is shadowed by an earlier plugin")
                    continue
                table[name] = item
            self._cache[hook] = table
        return self._cache[hook]

    def _where(self, plugin_name: str, hook: str) -> str:
        """file:line of a plugin's hook function, for messages about what it returned."""
        function = getattr(self.pm.get_plugin(plugin_name), hook, None)
        try:
            function = inspect.unwrap(function)
            return f"{inspect.getsourcefile(function)}:{function.__code__.co_firstlineno}"
        except (TypeError, AttributeError):
            return f"plugin {plugin_name}"


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
