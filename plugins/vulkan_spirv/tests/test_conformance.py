"""retarget's conformance suite (retarget.testing.conformance), run against this plugin, as
`pytest --pyargs retarget.testing --retarget-plugin vulkan_spirv` runs it."""

from retarget.testing.conformance import *  # noqa: F403

RETARGET_PLUGIN = "vulkan_spirv"
