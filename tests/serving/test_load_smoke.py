"""A short load smoke on the served stack: 16 concurrent clients with the OpenAI client's default
sampling, mixed prompt lengths, completions with every fourth request a chat completion, streamed
and not. Every request must succeed (0 failed; the client does not retry). The full table
(concurrency 1-64, mount against local disk) is `make bench-serve`, not a test."""
from __future__ import annotations

import pytest

from tests.serving.stack import SERVED, Served
from tests.serving.load import run_load


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_16_concurrent_sampled_requests_all_succeed(served: Served, stream: bool):
    s = run_load(served.base_url, SERVED, count=32, concurrency=16, api_key=served.api_key, max_tokens=24,
                 stream=stream, limit_s=300, chat_every=4, seed=int(stream))
    served.results.setdefault("load_smoke", {})["streaming" if stream else "plain"] = s.as_dict()
    assert s.requests == 32 and s.failed == 0, s.as_dict()
    assert s.output_tokens_per_s > 0 and s.latency_s["p95"] is not None
    if stream:
        assert s.ttft_s["p50"] is not None and s.ttft_s["p50"] <= s.latency_s["p50"]
    c = served.container()
    assert c.attrs["RestartCount"] == 0 and c.attrs["State"]["Status"] == "running"
