"""A client that keeps asking a model through its Service while the cluster changes under it (a
rolling update, a lost node): the official ``openai`` client with its defaults (sampled, no
temperature), one request after another, every outcome kept with its time."""
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
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        # no retries of the client's own: every failure a user's first try would see is counted
        self._client = openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=0, timeout=self.timeout)

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

    def summary(self) -> dict:
        """Requests, failures, and the longest time between two answered requests (seconds without service)."""
        ends = sorted(o.at + o.took for o in self.outcomes if o.ok)
        gap = max((b - a for a, b in zip([0.0, *ends], ends)), default=0.0)
        return {"requests": len(self.outcomes), "failed": len(self.failed), "longest_gap_s": round(gap, 1),
                "errors": sorted({o.error for o in self.failed})[:5]}
