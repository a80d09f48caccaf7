"""`retarget new-plugin`: write a plugin package that installs, registers and passes the
conformance suite as it is, for a third party to make their own.

The files are `string.Template`s in `templates/`, laid out as the package is; `src/` becomes
`src/<package>/`, and `hook_*.tmpl` are the hooks pasted into `plugin.py`.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from ..errors import InputError

TEMPLATES = Path(__file__).parent / "templates"
KINDS = ("both", "target", "driver")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def names(name: str) -> dict[str, str]:
    """The spellings derived from the plugin's name: distribution, package, ..."""
    if not NAME_PATTERN.match(name):
        raise InputError(f"'{name}' is not a plugin name",
                         hint="use lowercase letters, digits and single hyphens, starting with a letter, e.g. acme-gpu")
    return {"name": name, "dist": f"retarget-{name}", "package": "retarget_" + name.replace("-", "_")}


def _fields(name: str, kind: str) -> dict[str, str]:
    from .. import __version__

    fields = names(name)
    target, driver = kind in ("both", "target"), kind in ("both", "driver")
    drivers = (name,) if driver else ()
    fields.update(
        retarget_version=__version__,
        description={"both": f"A retarget plugin: target {name} and driver {name}.",
                     "target": f"A retarget plugin: target {name}.",
                     "driver": f"A retarget plugin: driver {name}."}[kind],
        target_drivers=repr((*drivers, "local-task", "local-sync")),
        runs_on=(f"the {name} driver and on " if driver else "") + "the core's local-sync and local-task drivers",
        hooks="".join((TEMPLATES / "src" / f"hook_{h}.tmpl").read_text() for h, on in
                      (("targets", target), ("drivers", driver)) if on),
        what_works=", and ".join([f"target `{name}` compiles models"] * target +
                                 [f"driver `{name}` runs {'them' if target else 'models compiled for vmvx'} "
                                  "on the host CPU"] * driver),
        replace=" and ".join(["`compile` in targets.py with your code generator and the table with your chips"]
                             * target + ["the pieces of driver.py with your device API's"] * driver),
        usage="\n".join(["A model to try, `examples/tiny.mlir` (y = relu(x @ w + b)):", "",
                         "```",
                         f"retarget compile examples/tiny.mlir --target {name if target else 'vmvx'} -o m.rtm",
                         f"retarget run m.rtm --device {name if driver else 'local-task'} "
                         "--input \"2x4xf32=1 2 3 4 -1 0 1 2\"",
                         "```"]),
    )
    return fields


def _wanted(relative: Path, kind: str) -> bool:
    if relative.name.startswith("hook_"):
        return False
    if relative.name in ("targets.py.tmpl", "test_targets.py.tmpl"):
        return kind in ("both", "target")
    if relative.name == "driver.py.tmpl":
        return kind in ("both", "driver")
    return True


def create(name: str, directory: str | Path = ".", kind: str = "both") -> tuple[Path, list[Path]]:
    """Write the plugin package `retarget-<name>` into `directory`; returns (its folder, the files)."""
    if kind not in KINDS:
        raise InputError(f"no plugin kind '{kind}'", hint=f"use one of {', '.join(KINDS)}")
    fields = _fields(name, kind)
    root = Path(directory) / fields["dist"]
    if root.exists() and any(root.iterdir()):
        raise InputError(f"{root} already exists and is not empty", hint="choose another --dir, or remove it")
    written = []
    for template in sorted(TEMPLATES.rglob("*.tmpl")):
        relative = template.relative_to(TEMPLATES)
        if not _wanted(relative, kind):
            continue
        parts = list(relative.parts)
        if parts[0] == "src":
            parts.insert(1, fields["package"])
        path = root.joinpath(*parts).with_suffix("")  # drop .tmpl
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template.read_text()).substitute(fields))
        written.append(path)
    return root, written
