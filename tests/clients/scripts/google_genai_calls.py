"""The google-genai SDK's calls against Parlance's Gemini API, run by the SDK's own
venv: each part reports what the SDK parsed (its types validate every response).

PARLANCE_URL: the server; PARLANCE_MODEL: the model; PARLANCE_PARTS: which parts."""

import os

from _report import report
from google import genai
from google.genai import errors, types
from pydantic import BaseModel, Field

URL = os.environ["PARLANCE_URL"]
MODEL = os.environ.get("PARLANCE_MODEL", "smollm2-135m-instruct")
PARTS = os.environ.get("PARLANCE_PARTS", "").split(",")
client = genai.Client(api_key="unused", http_options=types.HttpOptions(
    base_url=URL, timeout=1_800_000, retry_options=types.HttpRetryOptions(attempts=1)))

WEATHER = types.FunctionDeclaration(
    name="get_weather", description="Current weather in a city",
    parameters_json_schema={"type": "object", "required": ["city"], "properties": {
        # bounded, so the forced call ends inside max_output_tokens whatever is sampled
        "city": {"type": "string", "pattern": "^[A-Za-z ]{1,24}$"}}})
NO_AFC = types.AutomaticFunctionCallingConfig(disable=True)


class Person(BaseModel):
    """Bounded so the grammar ends the object well inside `max_output_tokens` whatever a
    sampled tiny model writes (a name cut by the limit is JSON nothing can parse)."""
    name: str = Field(pattern=r"^[A-Za-z ]{1,24}$")
    age: int = Field(ge=0, le=150)


def _finish(response: types.GenerateContentResponse) -> str:
    return response.candidates[0].finish_reason.value


def text() -> dict:
    response = client.models.generate_content(
        model=MODEL, contents="Say hello.",
        config=types.GenerateContentConfig(max_output_tokens=16, temperature=0,
                                           system_instruction="Be brief."))
    usage = response.usage_metadata
    return {"text": response.text, "finish": _finish(response),
            "prompt_tokens": usage.prompt_token_count, "total": usage.total_token_count,
            "model_version": response.model_version, "response_id": response.response_id}


def stream() -> dict:
    chunks = list(client.models.generate_content_stream(
        model=MODEL, contents="Count to five.",
        config=types.GenerateContentConfig(max_output_tokens=16, temperature=0)))
    return {"chunks": len(chunks), "text": "".join(c.text or "" for c in chunks),
            "finish": _finish(chunks[-1]),
            "total": chunks[-1].usage_metadata.total_token_count}


def forced_call() -> dict:
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])], automatic_function_calling=NO_AFC,
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
            mode="ANY", allowed_function_names=["get_weather"])), max_output_tokens=64)
    asked = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    response = client.models.generate_content(model=MODEL, contents=[asked], config=config)
    calls = response.function_calls or []
    # the next turn: the call's answer, sent back as Gemini CLI does
    answer = types.Content(role="user", parts=[types.Part.from_function_response(
        name=calls[0].name, response={"output": "Sunny, 21 C"})])
    answer.parts[0].function_response.id = calls[0].id
    followed = client.models.generate_content(
        model=MODEL, contents=[asked, response.candidates[0].content, answer],
        config=types.GenerateContentConfig(tools=config.tools, max_output_tokens=16,
                                           automatic_function_calling=NO_AFC))
    return {"calls": [{"name": c.name, "args": c.args, "id": c.id} for c in calls],
            "finish": _finish(response), "followed": _finish(followed)}


def structured() -> dict:
    parsed = client.models.generate_content(
        model=MODEL, contents="Invent a person.",
        config=types.GenerateContentConfig(response_mime_type="application/json",
                                           response_schema=Person, max_output_tokens=64))
    by_json_schema = client.models.generate_content(
        model=MODEL, contents="Invent a person.",
        config=types.GenerateContentConfig(response_mime_type="application/json",
                                           response_json_schema=Person.model_json_schema(),
                                           max_output_tokens=64))
    return {"parsed": parsed.parsed.model_dump(), "json_schema": by_json_schema.text}


def thinking() -> dict:
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(
        include_thoughts=True, thinking_budget=64), max_output_tokens=96)
    asked = types.Content(role="user", parts=[types.Part(text="Why is the sky blue?")])
    response = client.models.generate_content(model=MODEL, contents=[asked], config=config)
    parts = response.candidates[0].content.parts or []
    again = client.models.generate_content(  # the turn replayed with its thoughts
        model=MODEL, config=config,
        contents=[asked, response.candidates[0].content,
                  types.Content(role="user", parts=[types.Part(text="And at sunset?")])])
    return {"thoughts": [p.text for p in parts if p.thought],
            "answer": "".join(p.text or "" for p in parts if not p.thought),
            "signed": [p.thought_signature is not None for p in parts],
            "thoughts_tokens": response.usage_metadata.thoughts_token_count,
            "again": _finish(again)}


def count() -> dict:
    counted = client.models.count_tokens(model=MODEL, contents="Hello there, how are you?")
    return {"total": counted.total_tokens}


def embed() -> dict:
    embedded = client.models.embed_content(
        model=MODEL, contents=["the cat sat", "on the mat"],
        config=types.EmbedContentConfig(output_dimensionality=8, task_type="RETRIEVAL_QUERY"))
    return {"sizes": [len(e.values) for e in embedded.embeddings]}


def models() -> dict:
    listed = [m.name for m in client.models.list()]
    one = client.models.get(model=MODEL)
    return {"listed": listed, "one": one.name, "actions": one.supported_actions}


def refused() -> dict:
    try:
        client.models.generate_content(model="no-such-model", contents="Hi")
    except errors.APIError as error:
        return {"code": error.code, "status": error.status, "message": error.message}
    return {"error": "no-such-model was answered"}


report({name: part for name, part in {
    "text": text, "stream": stream, "forced_call": forced_call, "structured": structured,
    "thinking": thinking, "count": count, "embed": embed, "models": models,
    "refused": refused}.items() if name in PARTS or PARTS == [""]})
