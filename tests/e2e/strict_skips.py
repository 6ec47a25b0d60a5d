"""pytest plugin (loaded by conftest.py): in CI a skipped test is a failed test.

A test that cannot run because something it needs is missing (root, a binary that was not
built, a tool that is not installed) is skipped with the reason -- outside CI. In CI (the
environment has ``CI`` set to a true value, or the tests run as root, as ``scripts/test.sh``
does) the same test *fails*, naming what was missing: a CI run never passes by skipping.
Outside CI every skip is listed with its reason in pytest's short summary (``-rs``).
"""

from __future__ import annotations

import os

import pytest

TRUE = {"1", "true", "yes", "on"}


def strict() -> bool:
    """True in CI: ``CI`` set to 1/true/yes/on, or running as root."""
    return os.environ.get("CI", "").strip().lower() in TRUE or os.geteuid() == 0


def pytest_configure(config) -> None:
    # List skips (with their reasons) in the short summary, besides failures and errors.
    chars = config.option.reportchars or ""
    if "s" not in chars and "a" not in chars and "A" not in chars:
        config.option.reportchars = chars + "s"


def _reason(rep) -> str:
    longrepr = rep.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail") and strict():
        rep.outcome = "failed"
        rep.longrepr = (f"{item.nodeid}: would be skipped ({_reason(rep)}), and in CI (CI set, or "
                        f"root) a skip is a failure: install or build what is missing")
