"""The core's own plugin: the vmvx target, the local drivers and the importers.

Registered through the `retarget.plugins` entry point like any other plugin.
Its hooks run first (`tryfirst`), so another plugin overrides a built-in only by
marking its own hook `tryfirst` too.
"""

from .hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl(tryfirst=True)
def retarget_targets():
    from .vmvx import VmvxTarget

    return [VmvxTarget()]


@hookimpl(tryfirst=True)
def retarget_drivers():
    from .local_drivers import LOCAL_SYNC, LOCAL_TASK

    return [LOCAL_TASK, LOCAL_SYNC]


@hookimpl(tryfirst=True)
def retarget_executable_loaders():
    from .vmvx import VmvxLoader

    return [VmvxLoader()]


@hookimpl(tryfirst=True)
def retarget_importers():
    from .importers.mlir import MlirImporter
    from .importers.onnx import OnnxImporter
    from .importers.torch_export import TorchImporter

    return [MlirImporter(), OnnxImporter(), TorchImporter()]
