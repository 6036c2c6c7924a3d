"""Unit tests read no host state (issue 57): the README's two commands pass in either order, so a stack of
the default name deployed on this machine (scripts/up) must not change what the graph tests see.

- Every unit test gets a ``.state`` of its own (components.config.load.state_folder points at the test's
  temp folder): no mount marker, hash cache or read-key note of a deployed stack is read.
- Anything that opens a file under the project's own ``.state`` during a unit test fails it, naming the
  file (an audit hook): a new read of the host's records cannot slip in unnoticed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

PROJECT_STATE = str(ROOT / ".state") + "/"
_guard = {"on": False}


def _audit(event: str, args: tuple) -> None:
    if _guard["on"] and event == "open" and args and isinstance(args[0], (str, bytes, Path)):
        path = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        if path.startswith(PROJECT_STATE) or path == PROJECT_STATE.rstrip("/"):
            _guard["on"] = False          # one report, not one per retry
            raise RuntimeError(f"a unit test read the host's state: {path} (unit tests see the state folder of "
                               "their own temp folder only; see tests/unit/conftest.py)")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def own_state_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import importlib

    load = importlib.import_module("components.config.load")    # the module (the package exports its function)
    folder = tmp_path / "unit-project" / ".state"    # the graph tests write it as <root>/.state, as the program makes it
    real = load.state_folder
    # the project's own folder is replaced; a test's own project folder (tmp) keeps its .state
    monkeypatch.setattr(load, "state_folder", lambda project_dir: str(folder) if os.path.realpath(project_dir) ==
                        os.path.realpath(ROOT) else real(project_dir))
    _guard["on"] = True
    yield folder
    _guard["on"] = False
