"""Prints each test suite's wall time and counts from a pytest JUnit report (scripts/test's last lines).

A suite is a test folder under tests/ (unit, integration, e2e, ...); its time is the sum of its
tests' times, which is its wall time since the suites run one test at a time.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def suite_of(classname: str) -> str:
    parts = classname.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def main(path: str) -> int:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"suite times: no JUnit report ({exc})")
        return 1
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case in root.iter("testcase"):
        suite = suite_of(case.get("classname", "?"))
        seconds[suite] += float(case.get("time", 0) or 0)
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[suite][outcome] += 1
    print("==> time per suite")
    for suite in sorted(seconds, key=seconds.get, reverse=True):
        c = counts[suite]
        print(f"    {suite:<12} {seconds[suite] / 60:6.1f} min  {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
