"""Test helpers shared by the core, the plugins and third parties."""
