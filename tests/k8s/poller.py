"""A client that keeps asking a model through its Service while the cluster changes under it (a
rolling update, a lost node): the official ``openai`` client with its defaults (sampled, no
temperature, its 2 retries of a failed connection), one request after another, every outcome kept
with its time. Only the timeout is shorter than the client's 10 minutes, so a lost pod shows.

With retries off (``max_retries=0``), 1 request of 482 failed during a rolling change on the test
cluster (APIConnectionError): the client's keep-alive connection to a pod that was stopping was
closed by it as the request went out; a retry goes through another connection, to a ready pod."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import openai


@dataclass
class Outcome:
    at: float          # seconds since the poller started
    ok: bool
    took: float
    error: str = ""


@dataclass
class Poller:
    base_url: str
    model: str
    timeout: float = 30.0
    max_retries: int = 2            # the openai client's default
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._client = openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=self.max_retries,
                                     timeout=self.timeout)

    def start(self) -> "Poller":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> "Poller":
        self._stop.set()
        self._thread.join(self.timeout + 10)
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                out = self._client.completions.create(model=self.model, prompt="RustFS is", max_tokens=4)
                ok, error = bool(out.choices), ""
            except Exception as exc:  # noqa: BLE001 - every failure is an outcome
                ok, error = False, f"{type(exc).__name__}: {str(exc)[:200]}"
            self.outcomes.append(Outcome(round(t0 - self.started, 2), ok, round(time.monotonic() - t0, 2), error))
            if not ok:
                time.sleep(0.2)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self, since: float = 0.0) -> dict:
        """Requests, failures, the longest time without an answered request (seconds without
        service, to the poller's stop), and the failures after ``since`` seconds."""
        ends = sorted(o.at + o.took for o in self.outcomes if o.ok)
        stopped = max((o.at + o.took for o in self.outcomes), default=0.0)
        gap = max((b - a for a, b in zip([0.0, *ends], [*ends, stopped])), default=0.0)
        return {"requests": len(self.outcomes), "failed": len(self.failed), "longest_gap_s": round(gap, 1),
                "since_s": round(since, 1), "failed_since": sum(1 for o in self.failed if o.at >= since),
                "errors": sorted({o.error for o in self.failed})[:5]}
