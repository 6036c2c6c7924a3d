"""No Python traceback reaches a user (issue 29): every pulumi command the reliability suite ran in
this process (tests/pulumi_cli.TRANSCRIPT: bad inputs, faults, restarts, TLS, cleanup) printed none.
Named to run last in the folder."""
from __future__ import annotations

import pytest

from tests.pulumi_cli import TRANSCRIPT


def test_no_pulumi_output_of_the_suite_holds_a_traceback():
    if not TRANSCRIPT:
        pytest.skip("no pulumi command ran in this process (run with the rest of tests/reliability)")
    found = [(cmd, out[max(0, out.index("Traceback") - 200):out.index("Traceback") + 800])
             for cmd, out in TRANSCRIPT if "Traceback" in out]
    assert not found, f"{len(found)} of {len(TRANSCRIPT)} outputs hold a traceback; the first:\n{found[0]}"
