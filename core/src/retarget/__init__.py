"""retarget: compile ML models once per target, run them on any device.

    art = retarget.compile("model.mlir", target=["vmvx", "llvm-cpu:host"])
    art.save("m.rtm")
    m = retarget.load("m.rtm", device="auto")
    y = m.predict(x)
"""

__version__ = "0.1.0"

from .compiler import compile  # noqa: E402,A004
from .dlpack import DeviceArray  # noqa: E402
from .errors import RetargetError  # noqa: E402
from .module_format import Artifact  # noqa: E402
from .runtime import LoadedModule, load  # noqa: E402


def plugins() -> list[dict]:
    """Every plugin found, working or broken, with its version, hooks and error.

    Every hook is called first, so a plugin whose hook raises is listed as broken."""
    from .plugin_manager import manager

    pm = manager()
    pm.call_every_hook()
    return [r.as_dict() for r in pm.records.values()]


def targets() -> dict:
    """Target backends by name."""
    from .plugin_manager import manager

    return dict(manager().by_name("retarget_targets"))


def drivers() -> dict:
    """HAL drivers by name."""
    from .plugin_manager import manager

    return dict(manager().by_name("retarget_drivers"))


def devices() -> list:
    """Every device of every driver, available or not (with the reason)."""
    from .runtime import all_devices

    return all_devices()


__all__ = ["Artifact", "DeviceArray", "LoadedModule", "RetargetError", "compile", "devices", "drivers", "load",
           "plugins", "targets"]
