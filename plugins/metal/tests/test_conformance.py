"""retarget's conformance suite (retarget.testing.conformance), run against this plugin, as
`pytest --pyargs retarget.testing --retarget-plugin metal` runs it. Its driver tests skip off macOS."""

from retarget.testing.conformance import *  # noqa: F403

RETARGET_PLUGIN = "metal"
