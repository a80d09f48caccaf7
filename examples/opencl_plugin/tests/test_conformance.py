"""retarget's conformance suite, run against this plugin: the same tests as
`pytest --pyargs retarget.testing --retarget-plugin opencl`. Tests that need an OpenCL device
skip, and say why, when there is none."""

from retarget.testing.conformance import *  # noqa: F403

RETARGET_PLUGIN = "opencl"
