"""Tables of handlers filled by decorators: `@handles("a", "b")` puts the function under each name."""

from __future__ import annotations

from collections.abc import Callable


def registrar(table: dict, prefix: str = "") -> Callable:
    """A decorator factory that registers a function in `table` under `prefix + name` for each name."""

    def names(*keys: str):
        def register(fn):
            for key in keys:
                table[prefix + key] = fn
            return fn

        return register

    return names
