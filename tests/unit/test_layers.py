"""The import contract (.importlinter, run by scripts/test) holds for the project, and fails, naming
the import, on a copy of the project given a deliberate upward import or a circle."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=where, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(where)})


@pytest.fixture
def copy(tmp_path) -> Path:
    for name in ("components", "bench"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def add_import(module: Path, line: str) -> None:
    text = module.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    module.write_text(head + sep + line + "\n" + rest if sep else line + "\n" + text)


def test_the_project_keeps_its_contracts():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "4 kept, 0 broken" in out.stdout


def test_an_upward_import_breaks_the_layers(copy):
    # storage (a low layer: S3 helpers) reaching up into the targets
    add_import(copy / "components" / "storage" / "s3.py", "from components.targets import TARGETS  # noqa: F401")
    out = lint(copy)
    assert out.returncode != 0
    assert "components.storage is not allowed to import components.targets" in out.stdout, out.stdout[-3000:]
    assert "components.storage.s3 -> components.targets" in out.stdout


def test_an_import_circle_breaks_the_contract(copy):
    # config/reader.py <-> config/rules.py (rules reads with the Reader)
    add_import(copy / "components" / "config" / "reader.py", "from components.config import rules  # noqa: F401")
    out = lint(copy)
    assert out.returncode != 0
    assert "no import circle" in out.stdout and "BROKEN" in out.stdout, out.stdout[-3000:]


def test_the_program_may_not_import_the_benchmarks(copy):
    add_import(copy / "components" / "core" / "plan.py", "import bench.stats  # noqa: F401")
    out = lint(copy)
    assert out.returncode != 0 and "the program does not import the benchmarks BROKEN" in out.stdout.replace("\n", " ")
