"""The official `ollama` JavaScript client (npm `ollama`) against `parlance serve` with
SmolLM2 on Ollama's native API: chat and generate, streamed and not, `format` with a
JSON Schema, a tool result sent back in the history, `think: false`, and an unknown
model raising the client's `ResponseError` with a 404. What is tested is that the
client accepts every byte and gets the answer it asked for."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.npm import npm_package
from tests.support.serve_process import ServeProcess, serve

pytestmark = [pytest.mark.clients, pytest.mark.model]

OLLAMA_JS_VERSION = "0.6.4"
MODEL = "smollm2:135m"  # Ollama's name:tag spelling of the default model

SCRIPT = r"""
import { Ollama } from "ollama";

const ollama = new Ollama({ host: process.env.PARLANCE_URL });
const model = process.env.PARLANCE_MODEL;
const options = { temperature: 0, num_predict: 40 };
const out = {};
const haiku = [{ role: "user", content: "Write a haiku about the sea." }];

const whole = await ollama.chat({ model, messages: haiku, options });
out.chat = { content: whole.message.content, done: whole.done,
             done_reason: whole.done_reason, eval_count: whole.eval_count,
             prompt_eval_count: whole.prompt_eval_count,
             eval_duration: whole.eval_duration, total_duration: whole.total_duration };

let streamed = "";
const dones = [];
for await (const part of await ollama.chat({ model, messages: haiku, options, stream: true })) {
  streamed += part.message.content;
  dones.push(part.done);
}
out.chat_stream = { content: streamed, dones };

const generated = await ollama.generate({ model, prompt: "Once upon a time", options });
out.generate = { response: generated.response, context: generated.context.length,
                 prompt_eval_count: generated.prompt_eval_count,
                 eval_count: generated.eval_count, done_reason: generated.done_reason };
let pieces = "";
for await (const part of await ollama.generate({ model, prompt: "Once upon a time", options,
                                                 stream: true })) {
  pieces += part.response;
}
out.generate_stream = pieces;

const schema = { type: "object", properties: { name: { type: "string", maxLength: 20 },
                                               age: { type: "integer" } },
                 required: ["name", "age"] };
const person = await ollama.chat({ model, format: schema, options: { temperature: 0 },
  messages: [{ role: "user", content: "John is 31 years old. Reply in JSON." }] });
out.format = person.message.content;

const tools = [{ type: "function", function: {
  name: "get_weather", description: "Get the current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } },
                required: ["city"] } } }];
const answered = await ollama.chat({ model, tools, options, messages: [
  { role: "user", content: "What is the weather in Paris?" },
  { role: "assistant", content: "",
    tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
  { role: "tool", tool_name: "get_weather",
    content: "It is 11 degrees Celsius and sunny in Paris." }] });
out.tool_answer = answered.message.content;

const plain = await ollama.chat({ model, messages: haiku, options, think: false });
out.think_false = plain.message.content;

try {
  await ollama.chat({ model: "nope:latest", messages: haiku });
  out.missing = "no error";
} catch (error) {
  out.missing = { name: error.name, status: error.status_code, error: error.error };
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def client_dir():
    return npm_package("ollama", OLLAMA_JS_VERSION)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve(tmp_path_factory.mktemp("ollama-js-server")) as running:
        yield running


def test_the_ollama_js_client_speaks_to_parlance(client_dir, server):
    node = shutil.which("node")
    assert node is not None  # (npm_package skipped already without npm)
    run = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT], cwd=client_dir, capture_output=True,
        text=True, timeout=1800,
        env={"PATH": "/usr/bin:/bin", "PARLANCE_URL": server.base_url,
             "PARLANCE_MODEL": MODEL})
    assert run.returncode == 0, run.stderr[-3000:] + server.output()[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    chat = out["chat"]
    assert chat["content"] and chat["done"] is True and chat["done_reason"] in ("stop",
                                                                               "length")
    assert chat["eval_count"] > 0 and chat["prompt_eval_count"] > 0
    assert chat["total_duration"] >= chat["eval_duration"] > 0
    # greedy: the stream says what the whole answer said, and only its last line is done
    assert out["chat_stream"]["content"] == chat["content"]
    dones = out["chat_stream"]["dones"]
    assert dones[-1] is True and not any(dones[:-1])
    generate = out["generate"]
    assert generate["response"] == out["generate_stream"] != ""
    assert generate["context"] == generate["prompt_eval_count"] + generate["eval_count"]
    person = json.loads(out["format"])  # grammar-enforced: always valid for the schema
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    assert "11" in out["tool_answer"]  # the model read the tool's result
    assert out["think_false"] == chat["content"]  # SmolLM2 never reasons: nothing to turn off
    assert out["missing"] == {"name": "ResponseError", "status": 404,
                              "error": "model 'nope:latest' not found"}
