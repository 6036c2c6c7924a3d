"""Prints each test suite's time and counts from pytest JUnit reports (scripts/test's last lines), and
the total as one plain line ``total: N passed, N failed, N skipped``, after each failed test's name
and the first lines of why (so the end of a CI log, often all that is read of it, names them).

A suite is a test folder under tests/ (unit, integration, e2e, ...); its time is the sum of its
tests' times (each lane runs one test at a time; lane B runs beside lane A, so the suites' times add
up to more than the run's wall time).
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def suite_of(classname: str) -> str:
    parts = classname.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def cases(paths: list[str]):
    for path in paths:
        try:
            yield from ET.parse(path).getroot().iter("testcase")
        except (OSError, ET.ParseError) as exc:
            print(f"suite times: {path}: no JUnit report ({exc})")


def why(case: ET.Element, lines: int = 6, width: int = 240) -> str | None:
    """The first lines of a failed case's message, or None when it did not fail."""
    for child in case:
        if child.tag in ("failure", "error"):
            text = child.get("message") or child.text or ""
            said = [line.strip()[:width] for line in text.splitlines() if line.strip()][:lines]
            return "\n".join(f"        {line}" for line in said) or "        (no message)"
    return None


def main(paths: list[str]) -> int:
    failed: list[str] = []
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case in cases(paths):
        suite = suite_of(case.get("classname", "?"))
        seconds[suite] += float(case.get("time", 0) or 0)
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[suite][outcome] += 1
        said = why(case)
        if said is not None:
            failed.append(f"    {case.get('classname', '?')}::{case.get('name', '?')}\n{said}")
    print("==> time per suite")
    for suite in sorted(seconds, key=seconds.get, reverse=True):
        c = counts[suite]
        print(f"    {suite:<12} {seconds[suite] / 60:6.1f} min  {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    if failed:
        print("==> failed")
        print("\n".join(failed))
    total = {k: sum(c[k] for c in counts.values()) for k in ("passed", "failed", "skipped")}
    print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
