"""One served stack (tests/serving/stack.py) for the serving tests. The modules run in file order on
it: conformance first (it checks at its end that the container never restarted), then the load
smoke, then the faults that break things on purpose."""
from __future__ import annotations

import pytest

from tests.serving.stack import MODEL, RESULTS, Served, bring_up, tear_down


@pytest.fixture(scope="package")
def served(tmp_path_factory) -> Served:
    if not MODEL.joinpath("model.safetensors").exists():
        pytest.skip("scripts/build-smollm2-model has not run (scripts/test runs it)")
    ctx = bring_up(tmp_path_factory.mktemp("serving"))
    try:
        yield ctx
    finally:
        tear_down(ctx, RESULTS)
