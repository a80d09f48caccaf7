"""The plugin contract: everything a retarget plugin may contribute.

A plugin is a module (or object) named by an entry point in the group
`retarget.plugins`::

    [project.entry-points."retarget.plugins"]
    cuda = "retarget_cuda.plugin"

The module sets ``RETARGET_PLUGIN_API = 1`` (the API version it was written
for; `API_VERSION` below is the one this core speaks) and implements any of the
hooks below, each decorated with `hookimpl`. Every hook returns a list; the
results of all plugins are concatenated. When two plugins contribute the same
name, the one whose hook runs first wins: mark it `@hookimpl(tryfirst=True)` to
override a built-in, and the loser is reported by `retarget plugins`.

A plugin that fails to import, declares another API version, implements a hook
that this API lacks (unless marked `@hookimpl(optionalhook=True)`), defines a hook
without `@hookimpl`, or raises inside a hook is recorded as broken, with its error and
what to do about it; the rest of retarget keeps working.
The core's own target, drivers and importers register through these same hooks
(`retarget.builtin`). The objects returned implement the protocols in
`retarget.protocols`. `docs/plugins.md` is the guide, with an example of each;
`pytest --pyargs retarget.testing --retarget-plugin NAME` checks a plugin.
"""

from __future__ import annotations

import pluggy

API_VERSION = 1
PROJECT = "retarget"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def retarget_targets() -> list:
    """Compiler target backends this plugin contributes.

    Returns a list of objects implementing `retarget.protocols.TargetBackend`.
    Each backend's `name` (``cuda``, ``vulkan-spirv``) is what ``--target`` starts
    with; its `parse` owns the architecture table behind the colon. A backend may
    also say what it cannot run (optional `support(desc)`, a `SupportTable`), so
    that ``--fallback`` takes those ops instead of its `compile` failing.
    """


@hookspec
def retarget_drivers() -> list:
    """HAL drivers this plugin contributes.

    Returns a list of objects implementing `retarget.protocols.Driver`. A driver
    whose system library is missing is still returned: its `enumerate` reports
    the device as unavailable with the reason, for `retarget doctor`.
    """


@hookspec
def retarget_importers() -> list:
    """Frontends this plugin contributes.

    Returns a list of objects implementing `retarget.protocols.Importer`. The
    first importer whose `accepts(source)` is true reads the source.
    """


@hookspec
def retarget_executable_loaders() -> list:
    """Executable loaders for the host-memory drivers (`local-sync`, `local-task`).

    Returns a list of objects implementing `retarget.protocols.ExecutableLoader`,
    one per executable `format`. This is how a CPU target such as `llvm-cpu`
    makes its output runnable on the core's local drivers.
    """
