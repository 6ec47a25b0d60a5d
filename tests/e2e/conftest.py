"""pytest setup for Spillway's end-to-end tests (network namespaces, root only).

Everything under tests/e2e is skipped, with the reason shown, when not run as
root or when iproute2 / /dev/net/tun are missing. Stale namespaces of earlier
runs whose owning process died are removed once per session.
"""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _skip_reason():
    if os.geteuid() != 0:
        return "e2e tests need root (network namespaces, raw sockets, TUN)"
    if shutil.which("ip") is None:
        return "e2e tests need iproute2 ('ip')"
    if not os.path.exists("/dev/net/tun"):
        return "e2e tests need /dev/net/tun"
    return None


def pytest_collection_modifyitems(config, items):
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
