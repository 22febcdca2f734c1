"""The test run's options: ``--fast``, the inner loop (``scripts/test --fast``).

``--fast`` runs the unit, property and gateway tests on CPython: it leaves out the
end-to-end tests (marker ``e2e``: real workerd) and the ``slow`` ones (they boot Node, or
run a long simulation), and property tests draw a fifth of their examples
(:mod:`tests.examples`). The full run, ``scripts/test`` (what CI runs), has them all.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests import examples

#: No property test is timed (hypothesis's default fails an example that takes over 200 ms,
#: which a loaded CI machine's pause can cause): what they check is behaviour, not speed.
settings.register_profile("project", deadline=None)
#: Property tests that name no number of examples draw this many in the fast loop.
settings.register_profile("fast", parent=settings.get_profile("project"), max_examples=20)
settings.load_profile("project")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast loop: no e2e or slow tests, a fifth of the hypothesis examples",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        examples.FAST = True
        settings.load_profile("fast")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    kept, left_out = [], []
    for item in items:
        slow = item.get_closest_marker("e2e") or item.get_closest_marker("slow")
        (left_out if slow else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
