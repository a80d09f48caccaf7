"""The core's own compiler target: `vmvx`, the numpy reference."""
