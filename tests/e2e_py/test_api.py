"""The OpenAI API of `tandem serve`, through the official openai client (default model, CPU)."""
import asyncio

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

HI = [{"role": "user", "content": "Say hello."}]


def test_health_and_models(server, model):
    assert httpx.get(server.url + "/health").status_code == 200
    assert model
    assert httpx.get(server.url + "/version").json()["version"]


def test_chat(client, model):
    r = client.chat.completions.create(model=model, messages=HI, max_tokens=8, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.message.content
    assert c.finish_reason in ("stop", "length")
    # prompt_tokens includes the chat template: /tokenize with the same messages agrees.
    tok = httpx.post(client.base_url.join("/tokenize"), json={"messages": HI}).json()
    assert r.usage.prompt_tokens == tok["count"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completions_prompt_forms(client, model):
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4)
    assert r.choices[0].text and r.usage.completion_tokens <= 4
    ids = httpx.post(client.base_url.join("/tokenize"), json={"prompt": "Hello"}).json()["tokens"]
    r = client.completions.create(model=model, prompt=[ids, ids], max_tokens=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == r.choices[1].text  # greedy


def test_max_tokens_gives_length(client, model):
    r = client.chat.completions.create(model=model, messages=HI, max_tokens=3, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def test_streaming_matches_non_streaming(client, model):
    full = client.chat.completions.create(model=model, messages=HI, max_tokens=10)
    stream = client.chat.completions.create(model=model, messages=HI, max_tokens=10, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    finishes = [c.choices[0].finish_reason for c in chunks[:-1] if c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == full.choices[0].message.content


def test_stop_string_never_leaks(client, model):
    base = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=12, extra_body={"ignore_eos": True})
    text = base.choices[0].text
    assert len(text) > 4
    stop = text[2:4]
    r = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=12, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[: text.index(stop)]
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="1, 2, 3, 4,", max_tokens=12, stop=[stop], stream=True))
    assert streamed == r.choices[0].text


def test_n2_and_seed_reproducibility(client, model):
    kw = dict(model=model, messages=HI, max_tokens=8, temperature=1.0, seed=1234)
    a = client.chat.completions.create(n=2, **kw)
    assert sorted(c.index for c in a.choices) == [0, 1]
    b = client.chat.completions.create(n=2, **kw)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]


def test_logprobs(client, model):
    r = client.chat.completions.create(model=model, messages=HI, max_tokens=4, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) <= 2


async def _stream_one(aclient, model, i):
    s = await aclient.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Count to {i}."}], max_tokens=6, stream=True)
    text = ""
    async for c in s:
        if c.choices:
            text += c.choices[0].delta.content or ""
    return text


def test_twenty_concurrent_streams(aclient, model):
    async def run():
        return await asyncio.gather(*[_stream_one(aclient, model, i) for i in range(20)])
    texts = asyncio.run(run())
    assert len(texts) == 20 and all(isinstance(t, str) for t in texts)


def test_client_disconnect_mid_stream(server, client, model):
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=60, json={
            "model": model, "messages": HI, "max_tokens": 400, "stream": True, "ignore_eos": True}) as r:
        for _ in r.iter_lines():
            break  # the stream started; hang up
    for _ in range(100):
        m = _metrics(server)
        if m["tandem:num_requests_running"] == 0:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert m["tandem:num_requests_running"] == 0
    assert client.chat.completions.create(model=model, messages=HI, max_tokens=2).choices


@pytest.mark.parametrize("path,body,status", [
    ("/v1/chat/completions", "{", 400),
    ("/v1/chat/completions", {"messages": []}, 400),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400),
    ("/v1/chat/completions", {"messages": "hi"}, 400),
    ("/v1/chat/completions", {"messages": HI, "temperature": "hot"}, 400),
    ("/v1/chat/completions", {"messages": HI, "n": 0}, 400),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 10**6}, 400),
    ("/v1/chat/completions", {"messages": HI, "logprobs": True, "top_logprobs": 50}, 400),
    ("/v1/chat/completions", {"messages": HI, "stream_options": {"include_usage": True}}, 400),
    ("/v1/chat/completions", {"messages": HI, "model": "no-such-model"}, 404),
    ("/v1/completions", {"prompt": [[1, 2], [10**9]]}, 400),
    ("/v1/completions", {"prompt": 5}, 400),
    ("/v1/nope", {}, 404),
])
def test_malformed_requests(server, path, body, status):
    kw = {"content": body} if isinstance(body, str) else {"json": body}
    r = httpx.post(server.url + path, headers={"content-type": "application/json"}, **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert httpx.get(server.url + "/health").status_code == 200


def test_wrong_method_and_big_body(server):
    assert httpx.get(server.url + "/v1/chat/completions").status_code == 405
    assert httpx.post(server.url + "/v1/completions", content=b"x" * (9 << 20)).status_code == 413
    assert httpx.get(server.url + "/health").status_code == 200


def test_openai_client_raises_typed_errors(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="x", messages=[], max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=HI, max_tokens=2)


def _metrics(server) -> dict:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(server.url + "/metrics").text):
        for s in fam.samples:
            key = s.name if "finished_reason" not in s.labels else f"{s.name}:{s.labels['finished_reason']}"
            if "le" not in s.labels:
                out[key] = out.get(key, 0) + s.value
    return out


def test_metrics_move(server, client, model):
    before = _metrics(server)
    client.completions.create(model=model, prompt="Hello", max_tokens=3, extra_body={"ignore_eos": True})
    after = _metrics(server)
    assert after["tandem:generation_tokens_total"] >= before["tandem:generation_tokens_total"] + 3
    assert after["tandem:prompt_tokens_total"] > before["tandem:prompt_tokens_total"]
    assert after["tandem:request_success_total:length"] == before["tandem:request_success_total:length"] + 1
    assert after["tandem:e2e_request_latency_seconds_count"] > before["tandem:e2e_request_latency_seconds_count"]
    assert 0 <= after["tandem:kv_cache_usage_perc"] <= 1
