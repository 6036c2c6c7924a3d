"""A bounded load generator for an OpenAI-compatible endpoint, with the official ``openai`` client.

Reports what ``vllm bench serve`` reports: requests/s, output tokens/s, time to first token (TTFT)
and end-to-end latency at p50/p95/p99, and failed requests. Every run is bounded twice: a request
count and a wall-clock limit (no request starts after it, and the ones still running are cancelled
at ``limit_s + request_timeout``); it sends only to the URL it is given (loopback in our tests and
bench). The client runs with its defaults except ``max_retries=0``: a retried request would hide a
failure, and failures are what this counts.

Two shapes:
- :func:`run_load`: ``count`` requests at a fixed concurrency (a closed loop per worker);
- :class:`SteadyLoad`: a few workers sending one request after another in a background thread
  until stopped, each request's start, end and outcome kept, to see a fault's effect over time;
- :class:`StreamLoop`: one client streaming long completions back to back, each stream's wall-clock
  start, first chunk, end and finish reason kept: a stream that broke after its first chunk is a
  broken stream, one refused before it is not (issue 58: what a server's stop does to a stream).
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Optional

import openai

WORDS = ("object storage keeps model weights in a bucket while every serving node mounts the same "
         "prefix read only so that no local copy can drift and a new host starts from the one copy "
         "in the store the engine loads tensors through the mount and answers requests").split()


def prompt_of(words: int, rnd: random.Random) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(words))


def mixed_prompts(count: int, lengths: tuple[int, ...] = (8, 32, 96, 192), seed: int = 0) -> list[str]:
    """``count`` prompts cycling over ``lengths`` (in words; about 1.3 tokens a word here)."""
    rnd = random.Random(seed)
    return [prompt_of(lengths[i % len(lengths)], rnd) for i in range(count)]


@dataclass
class Outcome:
    ok: bool
    start: float                      # monotonic seconds
    end: float
    ttft: Optional[float] = None      # streaming only
    output_tokens: int = 0
    status: Optional[int] = None      # HTTP status of a failure, None for a connection failure
    error: str = ""
    text: str = ""

    @property
    def latency(self) -> float:
        return self.end - self.start


async def one_request(client: openai.AsyncOpenAI, model: str, prompt: str, max_tokens: int, stream: bool,
                      chat: bool = False, **sampling) -> Outcome:
    """One request with the client's default sampling (no ``temperature`` unless given)."""
    start = time.monotonic()
    ttft = None
    text: list[str] = []
    tokens = 0
    try:
        if chat:
            kwargs = dict(model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                          **sampling)
            create = client.chat.completions.create
        else:
            kwargs = dict(model=model, prompt=prompt, max_tokens=max_tokens, **sampling)
            create = client.completions.create
        if stream:
            chunks = await create(stream=True, stream_options={"include_usage": True}, **kwargs)
            async for chunk in chunks:
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    piece = choice.delta.content if chat else choice.text
                    if piece:
                        if ttft is None:
                            ttft = time.monotonic() - start
                        text.append(piece)
        else:
            answer = await create(**kwargs)
            tokens = answer.usage.completion_tokens if answer.usage else 0
            text.append(answer.choices[0].message.content if chat else answer.choices[0].text)
        return Outcome(True, start, time.monotonic(), ttft, tokens, text="".join(text))
    except openai.APIStatusError as exc:
        return Outcome(False, start, time.monotonic(), status=exc.status_code, error=str(exc)[:300])
    except (openai.APIError, OSError, asyncio.TimeoutError) as exc:
        return Outcome(False, start, time.monotonic(), error=f"{type(exc).__name__}: {exc}"[:300])


def percentile(values: list[float], q: float) -> Optional[float]:
    """Linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class Summary:
    concurrency: int
    stream: bool
    requests: int
    failed: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: dict = field(default_factory=dict)
    latency_s: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(outcomes: list[Outcome], concurrency: int, stream: bool, duration: float) -> Summary:
    good = [o for o in outcomes if o.ok]
    bad = [o for o in outcomes if not o.ok]
    dist = lambda xs: {f"p{int(q * 100)}": (round(v, 4) if (v := percentile(xs, q)) is not None else None)  # noqa: E731
                       for q in (0.5, 0.95, 0.99)}
    statuses: dict[str, int] = {}
    for o in bad:
        statuses[str(o.status or "connection")] = statuses.get(str(o.status or "connection"), 0) + 1
    return Summary(
        concurrency=concurrency, stream=stream, requests=len(outcomes), failed=len(bad),
        duration_s=round(duration, 3), requests_per_s=round(len(good) / duration, 3) if duration else 0.0,
        output_tokens_per_s=round(sum(o.output_tokens for o in good) / duration, 2) if duration else 0.0,
        ttft_s=dist([o.ttft for o in good if o.ttft is not None]), latency_s=dist([o.latency for o in good]),
        statuses=statuses, errors=sorted({o.error for o in bad})[:5])


def client_for(base_url: str, api_key: str, timeout: float) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout, max_retries=0)


async def _run(base_url: str, api_key: str, model: str, prompts: list[str], concurrency: int, max_tokens: int,
               stream: bool, limit_s: float, request_timeout: float, chat_every: int) -> tuple[list[Outcome], float]:
    client = client_for(base_url, api_key, request_timeout)
    queue = list(enumerate(prompts))
    outcomes: list[Outcome] = []
    started = time.monotonic()

    async def worker() -> None:
        while queue and time.monotonic() - started < limit_s:
            i, prompt = queue.pop(0)
            chat = bool(chat_every) and i % chat_every == chat_every - 1
            outcomes.append(await one_request(client, model, prompt, max_tokens, stream, chat=chat))

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    _, pending = await asyncio.wait(tasks, timeout=limit_s + request_timeout)
    for t in pending:
        t.cancel()
    duration = time.monotonic() - started
    await client.close()
    return outcomes, duration


def run_load(base_url: str, model: str, count: int, concurrency: int, *, api_key: str = "", max_tokens: int = 32,
             stream: bool = False, limit_s: float = 300, request_timeout: float = 120, chat_every: int = 0,
             prompts: Optional[list[str]] = None, seed: int = 0) -> Summary:
    """``count`` sampled requests (mixed prompt lengths) at ``concurrency``; every ``chat_every``-th
    one a chat completion (0: none)."""
    prompts = prompts or mixed_prompts(count, seed=seed)
    run = _run(base_url, api_key, model, prompts[:count], concurrency, max_tokens, stream, limit_s, request_timeout,
               chat_every)
    # its own thread: asyncio.run() in the caller's thread would leave it with no event loop (the
    # Pulumi SDK, in the same pytest process later, asks for one)
    with ThreadPoolExecutor(max_workers=1) as pool:
        outcomes, duration = pool.submit(asyncio.run, run).result()
    return summarize(outcomes, concurrency, stream, duration)


class SteadyLoad:
    """``workers`` clients sending sampled requests back to back (streaming every other one) from a
    background thread until :meth:`stop` or ``limit_s``; after a failure a worker waits ``pause_s``
    before its next request (a client retrying by hand)."""

    def __init__(self, base_url: str, model: str, *, api_key: str = "", workers: int = 4, max_tokens: int = 12,
                 request_timeout: float = 60, limit_s: float = 600, pause_s: float = 0.25) -> None:
        self.args = (base_url, api_key, model, workers, max_tokens, request_timeout, limit_s, pause_s)
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> "SteadyLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _main(self) -> None:
        base_url, api_key, model, workers, max_tokens, timeout, limit_s, pause_s = self.args
        client = client_for(base_url, api_key, timeout)
        started = time.monotonic()
        rnd = random.Random(1)

        async def worker(w: int) -> None:
            n = 0
            while not self._stop.is_set() and time.monotonic() - started < limit_s:
                o = await one_request(client, model, prompt_of(rnd.choice((8, 32, 96)), rnd), max_tokens,
                                      stream=(w + n) % 2 == 0)
                self.outcomes.append(o)
                n += 1
                if not o.ok:
                    await asyncio.sleep(pause_s)

        await asyncio.gather(*(worker(w) for w in range(workers)))
        await client.close()

    def stop(self, timeout: float = 120) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def wait_successes_after(self, t: float, n: int = 3, timeout: float = 600) -> float:
        """Blocks until ``n`` requests that started after ``t`` succeeded; returns when the first did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            after = sorted((o for o in list(self.outcomes) if o.ok and o.start >= t), key=lambda o: o.end)
            if len(after) >= n:
                return after[0].end
            time.sleep(0.2)
        raise AssertionError(f"fewer than {n} requests succeeded within {timeout} s after the fault")

    def report(self, fault_at: float) -> dict:
        """What a fault at ``fault_at`` did: the longest time after it in which no request was
        answered (from the fault to the first answer, and between answers), the failed requests,
        those of them already in flight at the fault, and the failures among requests sent after
        service was back (after the first answer to a request sent after the first failure)."""
        outs = sorted(self.outcomes, key=lambda o: o.start)
        failed = [o for o in outs if not o.ok and o.end >= fault_at]
        in_flight = [o for o in failed if o.start < fault_at]
        answers = sorted(o.end for o in outs if o.ok and o.end >= fault_at)
        marks = [fault_at, *answers]
        gap = max((b - a for a, b in zip(marks, marks[1:])), default=float("inf"))
        restored = None
        if failed:
            first_fail = min(o.start for o in failed)
            restored = min((o.end for o in outs if o.ok and o.start > first_fail), default=None)
        after_back = [o for o in failed if restored is not None and o.start > restored]
        return {"requests": len([o for o in outs if o.end >= fault_at]), "failed": len(failed),
                "failed_in_flight": len(in_flight), "failed_after_restored": len(after_back),
                "longest_gap_s": round(gap, 1),
                "errors": sorted({o.error.split(":")[0] + (f" ({o.status})" if o.status else "") for o in failed})[:4]}


@dataclass
class Stream:
    start: float                      # wall clock (time.time()): comparable with the Docker engine's events
    end: float = 0.0
    first_chunk: Optional[float] = None
    finish_reason: Optional[str] = None
    chunks: int = 0
    error: str = ""

    @property
    def broken(self) -> bool:
        """Cut after its first chunk (a stream refused before it is a failed request, not a broken stream)."""
        return self.first_chunk is not None and self.finish_reason is None

    def spans(self, t: float) -> bool:
        return self.start <= t <= self.end


class StreamLoop:
    """One OpenAI client (its defaults but ``max_retries=0``) streaming ``max_tokens``-token completions of
    ``model`` back to back (``gap_s`` apart) in a background thread until stopped; ``ignore_eos`` makes each stream
    its full length, so one is nearly always in flight."""

    def __init__(self, base_url: str, model: str, *, api_key: str = "", max_tokens: int = 300,
                 request_timeout: float = 300, pause_s: float = 0.25, gap_s: float = 0.0) -> None:
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=request_timeout,
                                    max_retries=0)
        self.model, self.max_tokens, self.pause_s, self.gap_s = model, max_tokens, pause_s, gap_s
        self.streams: list[Stream] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "StreamLoop":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(self.client.timeout + 30 if isinstance(self.client.timeout, (int, float)) else 330)

    def _run(self) -> None:
        rnd = random.Random(2)
        while not self._stop.is_set():
            s = Stream(start=time.time())
            self.streams.append(s)
            try:
                for chunk in self.client.completions.create(
                        model=self.model, prompt=prompt_of(16, rnd), max_tokens=self.max_tokens, stream=True,
                        extra_body={"ignore_eos": True}):
                    for choice in chunk.choices:
                        s.chunks += 1
                        if s.first_chunk is None:
                            s.first_chunk = time.time()
                        if choice.finish_reason:
                            s.finish_reason = choice.finish_reason
            except (openai.APIError, OSError) as exc:
                s.error = f"{type(exc).__name__}: {exc}"[:300]
            s.end = time.time()
            # after a failed stream, pause_s; after a finished one, gap_s (0: the next one at once)
            self._stop.wait(self.pause_s if s.finish_reason is None else self.gap_s)

    def summary(self) -> dict:
        done = [s for s in self.streams if s.end]
        return {"streams": len(done), "finished": sum(1 for s in done if s.finish_reason),
                "broken": sum(1 for s in done if s.broken),
                "refused": sum(1 for s in done if s.first_chunk is None and s.finish_reason is None),
                "errors": sorted({s.error.split(":")[0] for s in done if s.error})[:4]}
