"""pytest setup for Spillway's end-to-end tests (network namespaces, root only).

Without root, iproute2 or /dev/net/tun nothing under tests/e2e can run: outside CI every test is
then skipped with the reason (listed in the summary); in CI (``CI`` set, or root) a test that
would be skipped -- for this or any other missing prerequisite -- fails instead
(``strict_skips.py``). Stale namespaces of earlier runs whose owning process died are removed
once per session.
"""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The hooks that turn skips into failures in CI, and list skips in the summary otherwise.
from strict_skips import pytest_runtest_makereport  # noqa: E402,F401
from strict_skips import pytest_configure as _strict_configure  # noqa: E402


def pytest_configure(config):
    _strict_configure(config)
    config.addinivalue_line(
        "markers", "long: takes a minute or more; runs first, so that processes of a suite split "
        "by hand (pytest -n 2) finish together")


def _skip_reason():
    if os.geteuid() != 0:
        return "e2e tests need root (network namespaces, raw sockets, TUN)"
    if shutil.which("ip") is None:
        return "e2e tests need iproute2 ('ip')"
    if not os.path.exists("/dev/net/tun"):
        return "e2e tests need /dev/net/tun"
    return None


def pytest_collection_modifyitems(config, items):
    # The long tests first (a stable sort keeps the order of the rest): with the suite split
    # over processes, a long test started last would keep one of them busy alone at the end.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    reason = _skip_reason()
    if reason is None:
        return
    here = Path(__file__).resolve().parent
    marker = pytest.mark.skip(reason=reason)
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(marker)


@pytest.fixture(scope="session", autouse=True)
def _stale_cleanup():
    if _skip_reason() is None:
        import topo

        topo.cleanup_stale()
    yield
