"""The conformance suite: what every target, driver and executable loader must do.

Run it against an installed plugin:

    pytest --pyargs retarget.testing --retarget-plugin NAME [--retarget-full]

or collect it inside a plugin's own tests, in a module holding

    from retarget.testing.conformance import *  # noqa: F403
    RETARGET_PLUGIN = "NAME"

`test_plugin.py` checks the plugin as a whole, `test_target.py` each target, `test_driver.py` each
driver (`test_threads.py` under 16 threads, `test_leaks.py` over many calls and loads), `test_loader.py`
each executable loader; `kit.py` holds what they share and `fixtures.py` their parameters. A test that
needs a device the machine lacks skips, and says why.
"""

from retarget.testing.conformance.fixtures import *  # noqa: F403
from retarget.testing.conformance.fixtures import __all__ as _fixtures
from retarget.testing.conformance.test_driver import *  # noqa: F403
from retarget.testing.conformance.test_leaks import *  # noqa: F403
from retarget.testing.conformance.test_loader import *  # noqa: F403
from retarget.testing.conformance.test_plugin import *  # noqa: F403
from retarget.testing.conformance.test_target import *  # noqa: F403
from retarget.testing.conformance.test_threads import *  # noqa: F403

__all__ = sorted([*_fixtures, *(name for name in dir() if name.startswith("test_"))])
