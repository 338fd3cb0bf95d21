"""Run by instructor's own venv (tests/clients/test_instructor.py): structured output
from the OpenAI client in TOOLS and JSON_SCHEMA modes (whole, streamed partials, and an
iterable, whose schema wraps the model in `$defs`), and through instructor's Ollama
provider. Prints one JSON object: each call's validated result, or the exception."""

import os

import instructor
from _report import report
from openai import OpenAI
from pydantic import BaseModel, Field

URL = os.environ["PARLANCE_URL"]
MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": "Ann is 31 years old and lives in Paris."}]
OPTIONS = {"temperature": 0.0, "max_tokens": 200, "max_retries": 0}


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int
    city: str = Field(max_length=20)


def calls(client, model: str) -> dict:
    out: dict = {}
    whole = client.chat.completions.create(model=model, response_model=Person, messages=ASK,
                                           **OPTIONS)
    out["whole"] = whole.model_dump()
    partials = list(client.chat.completions.create_partial(
        model=model, response_model=Person, messages=ASK, stream=True, **OPTIONS))
    out["partials"] = len(partials)
    out["last_partial"] = partials[-1].model_dump() if partials else None
    people = list(client.chat.completions.create_iterable(
        model=model, response_model=Person, messages=ASK, **OPTIONS))
    out["iterable"] = [p.model_dump() for p in people]
    return out


openai = OpenAI(base_url=f"{URL}/v1", api_key="unused", max_retries=0)
report({
    "tools": lambda: calls(instructor.from_openai(openai, mode=instructor.Mode.TOOLS), MODEL),
    "json_schema": lambda: calls(instructor.from_openai(openai, mode=instructor.Mode.JSON_SCHEMA),
                                 MODEL),
    "ollama": lambda: calls(instructor.from_provider("ollama/smollm2:135m", base_url=f"{URL}/v1",
                                                     mode=instructor.Mode.TOOLS), "smollm2:135m"),
})
