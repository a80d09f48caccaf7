"""Errors that retarget raises on purpose.

Every error a user can cause is a `RetargetError`: it says what is wrong and,
in `hint`, what to do. The CLI prints it on one line and exits with code 2;
anything else escaping is a bug in retarget and keeps its traceback.
"""

from __future__ import annotations


class RetargetError(Exception):
    """Base class: `message` says what is wrong, `hint` what to do about it."""

    def __init__(self, message: str, *, hint: str | None = None, location: str | None = None):
        self.message = message
        self.hint = hint
        self.location = location
        super().__init__(self.oneline())

    def oneline(self) -> str:
        text = f"{self.location}: {self.message}" if self.location else self.message
        return f"{text} ({self.hint})" if self.hint else text


class ParseError(RetargetError):
    """Text that is not valid MLIR (or not valid for the dialect at hand)."""


class UnsupportedOpError(RetargetError):
    """An op that an importer or a target does not handle."""


class VerificationError(RetargetError):
    """IR that breaks an op's rules; the message names the op."""


class UnknownTargetError(RetargetError):
    """A target backend or architecture name that no plugin knows."""


class UnknownDeviceError(RetargetError):
    """A device or driver that is missing or unavailable."""


def no_such_device(driver: str, device_id: str, infos) -> UnknownDeviceError:
    """The error of a driver's `create` for an id it has no available device for: why the others are not
    available (their DeviceInfo reasons), and which ids are."""
    reasons = "; ".join(d.reason for d in infos if not d.available)
    available = ", ".join(d.id for d in infos if d.available)
    return UnknownDeviceError(f"{driver} has no device '{device_id}'" + (f": {reasons}" if reasons else ""),
                              hint=f"its devices: {available or 'none'} (`retarget doctor` says why)")


class ModuleFormatError(RetargetError):
    """A .rtm file that is truncated, tampered with, or from a newer format."""


class SignatureError(ModuleFormatError):
    """A module that is unsigned, signed by an untrusted key, or changed after signing, when trusted keys are given."""


class DeviceMemoryError(RetargetError):
    """A buffer that the device cannot allocate."""


class InputError(RetargetError):
    """A call argument of the wrong shape, dtype, or spelling."""


class PluginError(RetargetError):
    """A plugin that failed to load or broke the plugin contract."""


class KernelBoundsError(RetargetError):
    """A kernel whose loads and stores cannot be proved inside their buffers (`retarget.kernel.bounds`)."""


def closest(name: str, known, n: int = 3) -> list[str]:
    """Up to `n` names from `known` that look like `name`, for 'did you mean'."""
    import difflib

    known = list(known)
    hits = difflib.get_close_matches(name, known, n=n, cutoff=0.5)
    if not hits:
        hits = [k for k in known if name.lower() in k.lower() or k.lower() in name.lower()][:n]
    return hits


def suggestion(name: str, known) -> str:
    hits = closest(name, known)
    return f"did you mean {', '.join(hits)}?" if hits else f"known: {', '.join(sorted(known))}"
