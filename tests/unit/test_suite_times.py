"""scripts/suite_times.py, the last lines of scripts/test (often all a CI log shows): the failed tests are
named with the first lines of why, before the total."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.e2e.test_upgrade" name="test_a" time="60.0">
<failure message="AssertionError: pulumi preview --json failed (1):&#10;error: urn:x the cause&#10;&#10;more">trace</failure>
</testcase>
<testcase classname="tests.unit.test_x" name="test_b" time="0.5"/>
<testcase classname="tests.unit.test_x" name="test_c" time="0.1"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def run(*paths: Path) -> str:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "suite_times.py"), *map(str, paths)],
                          capture_output=True, text=True, check=True).stdout


def test_a_failed_test_is_named_with_why_before_the_total(tmp_path):
    report = tmp_path / "a.xml"
    report.write_text(REPORT)
    out = run(report)
    lines = out.splitlines()
    assert lines[-1] == "total: 1 passed, 1 failed, 1 skipped"
    at = lines.index("==> failed")
    assert lines[at + 1] == "    tests.e2e.test_upgrade::test_a"
    assert lines[at + 2].strip() == "AssertionError: pulumi preview --json failed (1):"
    assert lines[at + 3].strip() == "error: urn:x the cause"
    assert "e2e" in out and "1.0 min" in out


def test_no_failed_list_when_all_passed(tmp_path):
    report = tmp_path / "a.xml"
    report.write_text(REPORT.replace('<failure message="AssertionError: pulumi preview --json failed (1):&#10;'
                                     'error: urn:x the cause&#10;&#10;more">trace</failure>', ""))
    out = run(report)
    assert "==> failed" not in out
    assert out.splitlines()[-1] == "total: 2 passed, 0 failed, 1 skipped"
