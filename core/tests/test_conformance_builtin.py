"""retarget's conformance suite run against the core's own plugin: the vmvx target, the local-sync
and local-task drivers, and vmvx's executable loader."""

from retarget.testing.conformance import *  # noqa: F403

RETARGET_PLUGIN = "builtin"
