"""OpenAI conformance of the served endpoint, with the official ``openai`` Python client and its
defaults first (no ``temperature``: sampled), as users call it; every case twice: at the model's own
port (``direct``) and through the stack's one endpoint (``endpoint``: vllm-router with nginx in front). Each case checks the answer, not
just the status. Error cases must be 4xx with a message that says what was wrong, never a 5xx;
the last case checks, from vLLM's own /metrics, that nothing answered 5xx during the whole module
and, from Docker, that the container never restarted (no crash hidden by the restart policy)."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

import openai
import pytest

from tests.serving.stack import MAX_MODEL_LEN, SERVED, Served

PROMPT = "RustFS is"


@dataclass
class Door:
    """Where the client goes in: ``direct`` (the model's port) or ``endpoint`` (the stack's router)."""
    kind: str
    base_url: str
    api_key: str

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")


@pytest.fixture(scope="module", params=["direct", "endpoint"])
def door(served: Served, request) -> Door:
    return Door(request.param, served.base_url if request.param == "direct" else served.endpoint, served.api_key)


@pytest.fixture(scope="module")
def client(door: Door) -> openai.OpenAI:
    return openai.OpenAI(base_url=door.base_url, api_key=door.api_key, timeout=120)


@pytest.fixture(scope="module")
def started(served: Served) -> dict:
    """The vLLM container as the module found it: its start time and restart count."""
    c = served.container()
    return {"id": c.id, "StartedAt": c.attrs["State"]["StartedAt"], "RestartCount": c.attrs["RestartCount"]}


@pytest.fixture(scope="module")
def greedy(client, started) -> str:
    return client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=16, temperature=0).choices[0].text


def raw(door: Door | Served, path: str, body: bytes | None = None, key: str | None = "default",
        method: str | None = None) -> tuple[int, str]:
    """A request as curl would send it: (status, body text)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {door.api_key if key == 'default' else key}"
    req = urllib.request.Request(f"{door.root_url}{path}", data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{3,}", text)


# ------------------------------------------------------------------ completions and chat

def test_completion_with_the_clients_defaults_is_sampled_and_answers(client, started):
    a = client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=16)
    [choice] = a.choices
    assert a.model == SERVED and a.object == "text_completion"
    assert choice.text.strip() and choice.finish_reason in ("length", "stop")
    assert 0 < a.usage.completion_tokens <= 16 and a.usage.prompt_tokens > 0
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens


def test_chat_with_the_clients_defaults_answers_as_the_assistant(client):
    a = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "What is RustFS?"}],
                                       max_tokens=16)
    [choice] = a.choices
    assert a.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.message.content.strip() and choice.finish_reason in ("length", "stop")
    assert 0 < a.usage.completion_tokens <= 16


def test_greedy_completion_is_deterministic_and_equals_the_smoke_test(client, greedy, served):
    again = client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=16, temperature=0).choices[0].text
    assert again == greedy and words(greedy), greedy
    smoke = served.stack.outputs()["smoke_completions"][SERVED]      # 12 tokens of the same prompt
    assert greedy.startswith(smoke), (smoke, greedy)


def test_greedy_chat_is_deterministic(client):
    ask = dict(model=SERVED, messages=[{"role": "user", "content": "Name a fruit."}], max_tokens=12, temperature=0)
    first = client.chat.completions.create(**ask).choices[0].message.content
    assert first.strip() and client.chat.completions.create(**ask).choices[0].message.content == first


def test_streamed_completion_joins_to_the_same_text_and_ends_with_done(client, greedy, door):
    chunks = list(client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=16, temperature=0, stream=True))
    assert len(chunks) > 2, "one chunk is not a stream"
    assert "".join(c.choices[0].text for c in chunks if c.choices) == greedy
    assert chunks[-1].choices[0].finish_reason in ("length", "stop")
    # the wire: server-sent events ending with [DONE]
    status, body = raw(door, "/v1/completions", json.dumps(
        {"model": SERVED, "prompt": PROMPT, "max_tokens": 8, "stream": True}).encode())
    events = [ln for ln in body.splitlines() if ln.startswith("data: ")]
    assert status == 200 and events[-1] == "data: [DONE]" and len(events) > 2, body[-500:]
    assert all(json.loads(e[6:])["choices"] for e in events[:-1])


def test_streamed_chat_joins_to_the_same_text_and_ends_with_done(client, door):
    ask = dict(model=SERVED, messages=[{"role": "user", "content": "Say something about storage."}],
               max_tokens=16, temperature=0)
    whole = client.chat.completions.create(**ask).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **ask))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole and whole.strip()
    status, body = raw(door, "/v1/chat/completions", json.dumps({**ask, "stream": True}).encode())
    events = [ln for ln in body.splitlines() if ln.startswith("data: ")]
    assert status == 200 and events[-1] == "data: [DONE]", body[-500:]


def test_streamed_sampled_completion_reports_usage(client):
    chunks = list(client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=10, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    [usage] = [c.usage for c in chunks if c.usage]
    assert text.strip() and 0 < usage.completion_tokens <= 10


# ------------------------------------------------------------------ parameters

def test_n_2_gives_two_choices(client):
    a = client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=8, n=2)
    assert sorted(c.index for c in a.choices) == [0, 1]
    assert all(c.text.strip() for c in a.choices)
    assert a.usage.completion_tokens <= 16


def test_logprobs_for_each_generated_token(client):
    a = client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    lp = a.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == a.usage.completion_tokens
    assert all(v <= 0 for v in lp.token_logprobs)
    for token, top in zip(lp.tokens, lp.top_logprobs):
        assert 3 <= len(top) <= 4 and all(v <= 0 for v in top.values())
        # greedy: the chosen token is the most likely one
        assert max(top.values()) == pytest.approx(top.get(token, max(top.values())), abs=1e-4)
    chat = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert content and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_stop_sequence_ends_the_text_before_it(client, greedy):
    later = [w for w in words(greedy)[1:] if greedy.index(w) > 0]
    assert later, greedy
    stop = later[0]
    a = client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop])
    assert a.choices[0].text == greedy[:greedy.index(stop)]
    assert a.choices[0].finish_reason == "stop"


def test_same_seed_same_sampled_text(client):
    ask = dict(model=SERVED, prompt="Once upon a time", max_tokens=16, temperature=1.0, seed=1234)
    first = client.completions.create(**ask).choices[0].text
    assert first.strip() and client.completions.create(**ask).choices[0].text == first


# ------------------------------------------------------------------ errors: 4xx that say why, never 5xx

def test_max_tokens_beyond_the_context_is_a_400_naming_the_limit(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=MAX_MODEL_LEN * 4)
    assert err.value.status_code == 400 and str(MAX_MODEL_LEN) in str(err.value), str(err.value)


def test_prompt_longer_than_max_model_len_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=SERVED, prompt="storage " * (MAX_MODEL_LEN * 2), max_tokens=4)
    assert str(MAX_MODEL_LEN) in str(err.value), str(err.value)


def test_negative_max_tokens_is_a_400(client, door):
    # through the endpoint the router reads the body first: a value of the wrong type or range is its 422,
    # plain text naming the field ("max_tokens: invalid value: integer `-1`, expected u32")
    with pytest.raises(openai.BadRequestError if door.kind == "direct" else openai.UnprocessableEntityError) as err:
        client.completions.create(model=SERVED, prompt=PROMPT, max_tokens=-1)
    assert "max_tokens" in err.value.response.text, err.value.response.text


def test_unknown_model_is_a_404_naming_it(client, door):
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=4)
    assert "no-such-model" in str(err.value)
    if door.kind == "endpoint":          # and the models there are
        assert f"The models this endpoint serves: {SERVED}." in str(err.value), str(err.value)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])


def test_malformed_json_is_a_400(door):
    status, body = raw(door, "/v1/completions", b'{"model": "smollm2", "prompt": "RustFS is", ')
    assert status == 400, (status, body)
    status, body = raw(door, "/v1/chat/completions", b"not json at all")
    assert status == 400, (status, body)


def test_without_the_api_key_or_with_a_wrong_one_is_a_401(door):
    for key in ("", "wrong-key"):
        bad = openai.OpenAI(base_url=door.base_url, api_key=key or "EMPTY", timeout=30, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            bad.completions.create(model=SERVED, prompt=PROMPT, max_tokens=4)
        assert err.value.status_code == 401
    status, _ = raw(door, "/v1/models", key=None)
    assert status == 401


# ------------------------------------------------------------------ the other endpoints

def test_models_lists_the_served_model_with_its_context(client):
    [m] = client.models.list().data
    assert m.id == SERVED and m.owned_by
    assert (m.model_extra or {}).get("max_model_len") == MAX_MODEL_LEN


def test_health_answers_200(door):
    assert raw(door, "/health", key=None)[0] == 200


def metric(text: str, name: str) -> float:
    """The sum of a Prometheus metric's samples (all label sets)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_are_prometheus_text_with_request_counters(served, door):
    if door.kind == "endpoint":          # the router's own metrics, per server
        assert served.stack.outputs()["endpoint_metrics"] == f"{door.root_url}/metrics"
        assert raw(door, "/metrics", key=None)[0] == (401 if served.api_key else 200)   # with a key, only /health is open
        status, text = raw(door, "/metrics")
        assert status == 200 and "vllm_router_" in text and served.base_url.removesuffix("/v1") in text, text[:800]
        return
    assert served.stack.outputs()["models"][SERVED]["metrics_url"] == f"{served.root_url}/metrics"
    status, text = raw(served, "/metrics")
    assert status == 200 and "# TYPE vllm:request_success_total counter" in text, text[:500]
    assert metric(text, "vllm:request_success_total") >= 10
    assert metric(text, "vllm:generation_tokens_total") > 0 and metric(text, "vllm:prompt_tokens_total") > 0


def test_once_loaded_no_process_of_the_container_maps_or_holds_a_file_of_the_mount(served):
    """Why the mount is off the serving path (and `make bench-serve` finds mount and local disk
    equal): after loading, the weights are in the engine's memory, not mapped from /models."""
    out = served.container().exec_run(["sh", "-c", 'for p in /proc/[0-9]*; do grep -H " /models/" $p/maps; '
                                                   'ls -l $p/fd | grep " /models/"; done; echo scanned'])
    assert out.output.decode().strip() == "scanned", out.output.decode()[:2000]


def test_no_5xx_and_no_restart_during_the_whole_suite(served, started):
    status, text = raw(served, "/metrics")
    five = [ln for ln in text.splitlines() if ln.startswith("http_requests_total") and 'status="5xx"' in ln
            and float(ln.rsplit(" ", 1)[1]) > 0]
    assert status == 200 and metric(text, "http_requests_total") > 0, text[:500]
    assert five == [], five
    c = served.container()
    assert (c.id, c.attrs["State"]["StartedAt"], c.attrs["RestartCount"]) == \
        (started["id"], started["StartedAt"], started["RestartCount"]), "the vLLM container restarted"
    assert c.attrs["State"]["Status"] == "running"
