"""The harness's own rule (strict_skips.py): in CI a test that would be skipped fails, naming what
was missing; outside CI (not root, CI unset) it is skipped and the summary lists the reason.

Runs pytest in a subprocess on a throw-away test file with the plugin loaded; the second case
drops to user ``nobody`` (the tests run as root, which by itself counts as CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

SAMPLE = '''
import pytest

@pytest.mark.skipif(True, reason="frobnicator not installed")
def test_marked():
    pass

def test_skips_itself():
    pytest.skip("widget not built")

def test_passes():
    pass
'''


def run_pytest(env: dict, user: int | None = None) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="spw-strict-") as d:
        os.chmod(d, 0o755)
        test = Path(d) / "test_sample.py"
        test.write_text(SAMPLE)
        test.chmod(0o644)
        # The plugin goes beside the sample: user nobody may not be able to read the checkout
        # (a clone in a private temp directory, say).
        plugin = Path(d) / "strict_skips.py"
        plugin.write_text((HERE / "strict_skips.py").read_text())
        plugin.chmod(0o644)
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "strict_skips", "-p", "no:cacheprovider", str(test)],
            cwd=d, capture_output=True, text=True, timeout=120,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": d, "HOME": d, **env},
            preexec_fn=(lambda: (os.setgid(user), os.setuid(user))) if user is not None else None,
        )


def test_in_ci_a_skip_is_a_failure():
    r = run_pytest({"CI": "true"})
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    # A skip mark acts in the setup phase: failing there is reported as an error.
    assert "1 failed, 1 passed, 1 error" in out, out
    assert "would be skipped (frobnicator not installed)" in out, out
    assert "would be skipped (widget not built)" in out, out


def test_outside_ci_skips_are_listed_with_their_reason():
    r = run_pytest({}, user=65534)  # nobody, CI unset
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 passed, 2 skipped" in out, out
    assert "SKIPPED" in out and "frobnicator not installed" in out and "widget not built" in out, out
