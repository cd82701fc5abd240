"""response_format end to end: `tandem serve` on the default model through the openai client.

Every json_schema response of the corpus parses and validates against its schema
(jsonschema), json_object returns a JSON object, with and without a drafter (speculative
decoding checks drafts against the grammar), and bad response_format values are 400s naming
the field.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from schema_corpus import CORPUS  # noqa: E402

ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
MAX_TOKENS = 160


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, pipeline, *extra):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([os.environ.get("TANDEM_BIN", str(ROOT / "build" / "cli" / "tandem")), "serve",
                                      "--pipeline", str(pipeline), "--port", str(self.port), *extra],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("serving on"):
            self.proc.kill()
            raise RuntimeError(f"tandem serve did not start: {line!r}")
        deadline = time.time() + 180
        while httpx.get(self.url + "/health").status_code != 200:
            assert time.time() < deadline, "/health never became 200"
            time.sleep(0.2)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module", params=["default.yaml", "spec-ngram.yaml"])
def server(request):
    speculative = request.param.startswith("spec")
    # A draft every step: with the adaptive length the number of drafts depends on measured
    # step times (a loaded machine drafted a handful, all rejected), so "some accepted"
    # below would hang on timing.
    s = Server(ROOT / "pipelines" / request.param, *(["--set", "drafter.adaptive=false"] if speculative else []))
    s.speculative = speculative
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


ASK = [{"role": "user", "content": "Describe a person as JSON."}]


def _chat(client, response_format, **kw):
    return client.chat.completions.create(model="", messages=ASK, response_format=response_format,
                                          max_tokens=MAX_TOKENS, **kw)


@pytest.mark.parametrize("i", range(len(CORPUS)))
def test_json_schema_outputs_validate(client, i):
    schema = CORPUS[i][0]
    if schema is None:
        rf = {"type": "json_object"}
        schema = {"type": "object"}
    else:
        rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
    for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": i}):
        r = _chat(client, rf, **kw)
        c = r.choices[0]
        # At T > 0 a value the model did not finish within max_tokens is cut (finish_reason
        # length); greedy, the default model ends every corpus schema well within it. Any
        # output that ended did so where the grammar may end.
        if c.finish_reason == "length" and kw["temperature"] > 0:
            continue
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.message.content), schema)


def test_json_object_returns_an_object(client):
    r = _chat(client, {"type": "json_object"}, temperature=0)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_streamed_text_is_the_same_json(client):
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": CORPUS[1][0]}}
    whole = _chat(client, rf, temperature=0).choices[0].message.content
    parts = [ch.choices[0].delta.content or "" for ch in _chat(client, rf, temperature=0, stream=True) if ch.choices]
    assert "".join(parts) == whole


@pytest.mark.parametrize("rf,param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "sting"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_object", "schema": {}}, "response_format.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}},
     "response_format.json_schema.extra"),
    ({"type": "sound"}, "response_format.type"),
])
def test_bad_response_formats_are_400_naming_the_field(client, rf, param):
    with pytest.raises(openai.BadRequestError) as e:
        _chat(client, rf)
    assert e.value.body["param"] == param, e.value.body


def test_drafts_were_verified_under_the_grammar(server, client):
    """On the drafter's pipeline the corpus above ran with drafts: some were proposed and
    some accepted, and every output still validated."""
    if not server.speculative:
        pytest.skip("no drafter in this pipeline")
    metrics = httpx.get(server.url + "/metrics").text

    def counter(name):
        return sum(float(l.split()[-1]) for l in metrics.splitlines() if l.startswith(f"tandem:{name}"))

    assert counter("spec_decode_num_draft_tokens_total") > 0
    assert counter("spec_decode_num_accepted_tokens_total") > 0


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
@pytest.mark.parametrize("temperature", [0, 1.0])
def test_forced_tool_calls_follow_their_parameters_schema(client, tool_choice, temperature):
    """tool_choice required / named: the default model's (hermes) call format is the grammar,
    so the answer is always a call whose arguments validate against the function's schema."""
    for parallel in (True, False):
        r = client.chat.completions.create(
            model="", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
            tool_choice=tool_choice, parallel_tool_calls=parallel, max_tokens=MAX_TOKENS, temperature=temperature,
            seed=3)
        c = r.choices[0]
        # Parallel calls: the model may go on calling until max_tokens cuts a call (length;
        # the cut call is not in the message).
        assert c.finish_reason == "tool_calls" or (parallel and c.finish_reason == "length"), c
        assert c.message.tool_calls and (parallel or len(c.message.tool_calls) == 1)
        for call in c.message.tool_calls:
            if isinstance(tool_choice, dict):
                assert call.function.name == "add"
            jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


def test_response_format_with_a_forced_tool_call_is_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="", messages=ASK, tools=TOOLS, tool_choice="required",
                                       response_format={"type": "json_object"}, max_tokens=8)
    assert e.value.body["param"] == "response_format"


# A strict tool beside a plain one, under tool_choice auto.
STRICT_TOOLS = [{"type": "function", "function": dict(TOOLS[1]["function"], strict=True)}, TOOLS[0]]


def test_strict_tool_calls_under_auto_follow_their_schema(client):
    """tool_choice auto with a strict tool: the model may answer in text, but once it opens a
    call the call follows the format, and the strict function's arguments its schema (the
    other function's are only checked by the parser). Sampled over seeds, some answers call."""
    strict_calls = 0
    for seed in range(16):
        r = client.chat.completions.create(
            model="", messages=[{"role": "system", "content": "You only answer with tool calls."},
                                {"role": "user", "content": "Add 2 and 3."}],
            tools=STRICT_TOOLS, max_tokens=80, temperature=0.7, seed=seed)
        c = r.choices[0]
        assert (c.finish_reason == "tool_calls") == bool(c.message.tool_calls) or c.finish_reason == "length", c
        for call in c.message.tool_calls or []:
            if call.function.name == "add":
                strict_calls += 1
                jsonschema.validate(json.loads(call.function.arguments), PARAMS["add"])
    assert strict_calls > 0


@pytest.fixture(scope="module")
def glm_client():
    """The tiny random GLM-5-family model, with a short GLM-style template (its own leaves no
    room for a call in its 512-token context); the template teaches the glm4 call format."""
    s = Server(ROOT / "pipelines" / "safetensors.yaml", "--chat-template",
               str(Path(__file__).resolve().parent / "glm_short_tools.jinja"))
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    assert s.stop() == 0


# Bounded values: a random model would otherwise write a string or a number to max_tokens.
GLM_TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                     "b": {"type": "integer", "minimum": -9, "maximum": 9},
                                     "op": {"enum": ["plus", "minus"]}, "exact": {"type": "boolean"}},
    "required": ["a", "b", "op"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}]
GLM_PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in GLM_TOOLS}


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_glm4_forced_calls_follow_their_schema(glm_client, tool_choice, seed):
    """GLM's <tool_call>name<arg_key>..</arg_key><arg_value>..</arg_value></tool_call> format
    decoded under xgrammar's glm_xml grammar: even a random model's answer is a call whose
    arguments validate; streamed, its arguments arrive in fragments that add up to them."""
    kw = dict(model="", messages=[{"role": "user", "content": "add 2 and 3"}], tools=GLM_TOOLS, tool_choice=tool_choice,
              parallel_tool_calls=False, max_tokens=300, temperature=1.0, seed=seed)
    c = glm_client.chat.completions.create(**kw).choices[0]
    assert c.finish_reason == "tool_calls", c
    (call,) = c.message.tool_calls
    if isinstance(tool_choice, dict):
        assert call.function.name == "add"
    jsonschema.validate(json.loads(call.function.arguments), GLM_PARAMS[call.function.name])
    deltas = [tc for ch in glm_client.chat.completions.create(stream=True, **kw) if ch.choices
              for tc in ch.choices[0].delta.tool_calls or []]
    assert deltas[0].function.name == call.function.name and deltas[0].function.arguments == ""
    assert "".join(d.function.arguments for d in deltas[1:]) == call.function.arguments
