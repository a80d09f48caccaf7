"""`retarget new-plugin NAME`: scaffold a plugin package (see `retarget.scaffold`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def new_plugin(
    name: Annotated[str, typer.Argument(help="The plugin's name: target and driver NAME, distribution retarget-NAME.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create the folder retarget-NAME.")] = Path("."),
    kind: Annotated[str, typer.Option("--kind", help="What it contributes: target, driver, or both.")] = "both",
):
    """Create a plugin package that installs, registers and passes the conformance suite as it is.

    Then: `pip install -e retarget-NAME`, `retarget plugins`, `pytest retarget-NAME/tests`."""
    from rich.console import Console

    from .. import scaffold

    out = Console(soft_wrap=True)
    root, files = scaffold.create(name, directory, kind)
    _warn_on_clash(name, kind, out)
    out.print(f"created {root}/ ({scaffold.names(name)['dist']}, {kind}):")
    for path in files:
        out.print(f"  {path.relative_to(root)}")
    out.print("next:")
    out.print(f"  pip install -e {root}")
    out.print("  retarget plugins")
    out.print(f"  pytest {root / 'tests'}        # or: pytest --pyargs retarget.testing --retarget-plugin {name}")


def _warn_on_clash(name: str, kind: str, out) -> None:
    """A name that an installed plugin already contributes would be shadowed by it, or shadow it."""
    import retarget

    taken = [what for what, table, wanted in (("target", retarget.targets(), kind != "driver"),
                                              ("driver", retarget.drivers(), kind != "target"))
             if wanted and name in table]
    if taken:
        out.print(f"[yellow]note[/] an installed plugin already contributes a {' and a '.join(taken)} named "
                  f"'{name}'; the two would clash (`retarget plugins` would note which one is shadowed)")
