"""The agent-facing API of `tandem serve` on the default model, through the openai client:
tools rendered into the prompt and the response shapes of a tool round trip, logit_bias,
echo + logprobs against the logprobs of generated tokens, completions' default max_tokens,
refused fields, API keys. The 135M model does not call tools reliably by itself: real calls
come from tool_choice required, which decodes under the calls' grammar (the parser is covered
on recorded text by http_tools)."""
import json
import math

import httpx
import openai
import pytest

from conftest import Server

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _check_call_shape(message):
    for call in message.tool_calls or []:
        assert call.id and call.type == "function"
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments), dict)


def test_tools_reach_the_prompt_and_the_answer_has_openai_shape(client, model):
    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=1)
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0)
    # SmolLM2's template has no tools section: the server writes them into a system message.
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 40
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length", "tool_calls")
    assert (c.finish_reason == "tool_calls") == bool(c.message.tool_calls)
    _check_call_shape(c.message)
    none = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert none.choices[0].message.tool_calls is None
    assert none.usage.prompt_tokens == r.usage.prompt_tokens  # tools rendered for "none" too (as vLLM)


def test_tool_result_turn(client, model):
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"},
    ]
    r = client.chat.completions.create(model=model, messages=history, tools=TOOLS, max_tokens=24, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    _check_call_shape(r.choices[0].message)
    # The tool result is in the prompt: the same turn without it is shorter.
    shorter = client.chat.completions.create(model=model, messages=history[:2], tools=TOOLS, max_tokens=1)
    assert r.usage.prompt_tokens > shorter.usage.prompt_tokens


def test_streaming_with_tools(client, model):
    chunks = list(client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=24,
                                                 temperature=0, stream=True))
    assert len({c.id for c in chunks}) == 1
    assert all(c.system_fingerprint and c.system_fingerprint.startswith("fp_") for c in chunks)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    calls = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            calls.setdefault(tc.index, "")
            calls[tc.index] += tc.function.arguments or ""
    assert (finishes[0] == "tool_calls") == bool(calls)
    for args in calls.values():
        assert isinstance(json.loads(args), dict)


@pytest.mark.parametrize("parallel", [True, False])
def test_required_is_a_call(client, model, parallel):
    """tool_choice required decodes under the calls' grammar (the default model's hermes
    format): the answer is a call whatever the model would have said. With parallel calls the
    greedy 135M model repeats its call until max_tokens cuts one (finish_reason length; the
    cut call is not in the message)."""
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=60, temperature=0, parallel_tool_calls=parallel)
    c = r.choices[0]
    assert c.message.tool_calls
    assert c.finish_reason == "tool_calls" if not parallel else c.finish_reason in ("tool_calls", "length")
    assert parallel or len(c.message.tool_calls) == 1
    _check_call_shape(c.message)


def _streamed_calls(chunks):
    """Per tool-call index: its deltas in order."""
    calls = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            calls.setdefault(tc.index, []).append(tc)
    return calls


@pytest.mark.parametrize("parallel", [True, False])
def test_streamed_arguments_arrive_as_they_are_generated(client, model, parallel):
    """As OpenAI and vLLM stream them: a call's first delta carries its index, id, type and
    name with empty arguments; the arguments follow in fragments as they are generated, and
    they add up to the non-streamed arguments of the same (greedy) answer. Parallel calls
    each have their index; a call cut by max_tokens was streamed as far as it went."""
    kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=80, temperature=0,
              parallel_tool_calls=parallel)
    answer = client.chat.completions.create(**kw).choices[0]
    whole = answer.message.tool_calls
    chunks = list(client.chat.completions.create(stream=True, **kw))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [answer.finish_reason]
    calls = _streamed_calls(chunks)
    cut = 1 if answer.finish_reason == "length" and len(calls) > len(whole) else 0
    assert sorted(calls) == list(range(len(whole) + cut))
    assert parallel or (len(whole) == 1 and answer.finish_reason == "tool_calls")
    for k, deltas in calls.items():
        first, rest = deltas[0], deltas[1:]
        assert first.id and first.type == "function" and first.function.arguments == ""
        assert all(d.id is None and d.function.name is None for d in rest)
        if k == len(whole):
            continue  # the call max_tokens cut
        assert first.function.name == whole[k].function.name
        assert len(rest) > 1, "the arguments came in one piece"
        assert "".join(d.function.arguments for d in rest) == whole[k].function.arguments
        json.loads(whole[k].function.arguments)


@pytest.mark.parametrize("extra", [
    {"tool_choice": "bogus"},
    {"tool_choice": {"type": "function", "function": {"name": "launch_rockets"}}},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
    {"response_format": {"type": "json_object", "schema": {}}},
    {"response_format": {"type": "sound"}},
    {"extra_body": {"guided_json": {}}},
])
def test_refused_fields(client, model, extra):
    kwargs = {"tools": TOOLS, **extra}
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, **kwargs)


def _ids(client, text):
    return httpx.post(client.base_url.join("/tokenize"), json={"prompt": text}).json()["tokens"]


def test_logit_bias_forces_and_bans(client, model):
    prompt = "The capital of France is"
    base = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    first = _ids(client, prompt + base.choices[0].text)[len(_ids(client, prompt))]
    banned = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0,
                                       logit_bias={str(first): -100})
    assert banned.choices[0].text != base.choices[0].text
    forced_id = _ids(client, " banana")[0]
    forced = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0.8, seed=3,
                                       logit_bias={str(forced_id): 100})
    word = httpx.post(client.base_url.join("/detokenize"), json={"tokens": [forced_id]}).json()["prompt"]
    assert forced.choices[0].text == word
    for bad in ({"x": 1}, {"1": 101}, {"99999999": 1}):
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model=model, prompt=prompt, max_tokens=1, logit_bias=bad)


def test_echo_logprobs_equal_generated_logprobs(client, model):
    prompt = "The capital of France is"
    gen = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, logprobs=2)
    echo = client.completions.create(model=model, prompt=prompt + gen.choices[0].text, max_tokens=0,
                                     echo=True, logprobs=2)
    lp = echo.choices[0].logprobs
    assert echo.choices[0].text == prompt + gen.choices[0].text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert echo.usage.completion_tokens == 0
    n = len(gen.choices[0].logprobs.token_logprobs)
    assert lp.tokens[-n:] == gen.choices[0].logprobs.tokens
    for a, b in zip(lp.token_logprobs[-n:], gen.choices[0].logprobs.token_logprobs):
        assert math.isclose(a, b, abs_tol=2e-3), (a, b)  # one prefill vs token-by-token decode
    assert all(t is None or -50 < t <= 0 for t in lp.token_logprobs)


def test_completions_default_to_16_tokens(client, model):
    r = client.completions.create(model=model, prompt="Once upon a time", extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16
    assert r.choices[0].finish_reason == "length"
    assert r.system_fingerprint.startswith("fp_")


def test_context_error_names_prompt(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="hi " * 9000, max_tokens=1)
    assert e.value.body["param"] == "prompt"


@pytest.fixture(scope="module")
def keyed_server():
    s = Server(["--api-key", "sk-e2e"])
    yield s
    assert s.stop() == 0


def test_api_key(keyed_server):
    url = keyed_server.url + "/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    r = httpx.get(url + "/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    good = openai.OpenAI(base_url=url, api_key="sk-e2e", max_retries=0)
    m = good.models.list().data[0].id
    assert good.completions.create(model=m, prompt="Hi", max_tokens=2).choices[0].text is not None
    assert httpx.get(keyed_server.url + "/health").status_code == 200  # open by default
