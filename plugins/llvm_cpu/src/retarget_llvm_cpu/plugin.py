"""Entry point `llvm_cpu`: the `llvm-cpu` target and its executable loader."""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import LlvmCpuTarget

    return [LlvmCpuTarget()]


@hookimpl
def retarget_executable_loaders():
    from .loader import LlvmCpuLoader

    return [LlvmCpuLoader()]
