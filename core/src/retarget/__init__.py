"""retarget: compile ML models once per target, run them on any device."""

__version__ = "0.1.0"
