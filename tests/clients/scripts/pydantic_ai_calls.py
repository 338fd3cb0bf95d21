"""Run by pydantic-ai's own venv (tests/clients/test_pydantic_ai.py): one agent per
model class pydantic-ai offers for a local server (Chat, Responses, Anthropic, Ollama),
each making a text run, a streamed run, a structured-output run with a nested model
(its JSON Schema has `$defs`) and a direct request forced to call a function tool.
Prints one JSON object: what each call returned, or the exception it raised."""

import asyncio
import functools
import os

from _report import report
from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRequest, NativeOutput
from pydantic_ai.direct import model_request
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.ollama import OllamaModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.ollama import OllamaProvider
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition

URL = os.environ["PARLANCE_URL"]
MODEL = "smollm2-135m-instruct"
SETTINGS = {"temperature": 0.0, "max_tokens": 60}


class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)


class Trip(BaseModel):
    traveller: str = Field(max_length=20)
    destination: City


WEATHER = ToolDefinition(
    name="get_weather", description="Get the current weather in a city",
    parameters_json_schema=City.model_json_schema())


def models():
    openai = OpenAIProvider(base_url=f"{URL}/v1", api_key="unused")
    return {
        "chat": OpenAIChatModel(MODEL, provider=openai),
        "responses": OpenAIResponsesModel(MODEL, provider=openai),
        "anthropic": AnthropicModel(MODEL, provider=AnthropicProvider(base_url=URL,
                                                                      api_key="unused")),
        "ollama": OllamaModel("smollm2:135m", provider=OllamaProvider(base_url=f"{URL}/v1")),
    }


async def calls(model) -> dict:
    out: dict = {}
    agent = Agent(model, model_settings=SETTINGS)
    out["text"] = (await agent.run("Say hello in one short sentence.")).output
    async with agent.run_stream("Write a haiku about the sea.") as run:
        out["stream"] = [delta async for delta in run.stream_text(delta=True)]
    structured = Agent(model, output_type=Trip, model_settings={**SETTINGS, "max_tokens": 200})
    out["tool_output"] = (await structured.run("Ann flies to Paris, France.")).output.model_dump()
    response = await model_request(
        model, [ModelRequest.user_text_prompt("What is the weather in Paris?")],
        model_settings={**SETTINGS, "max_tokens": 200, "tool_choice": ["get_weather"]},
        model_request_parameters=ModelRequestParameters(function_tools=[WEATHER],
                                                        allow_text_output=False))
    called = [p for p in response.parts if isinstance(p, ToolCallPart)]
    out["forced_call"] = [{"name": p.tool_name, "args": City.model_validate(p.args_as_dict())
                           .model_dump()} for p in called]
    return out


async def native(model) -> dict:
    agent = Agent(model, output_type=NativeOutput(Trip),
                  model_settings={**SETTINGS, "max_tokens": 200})
    return (await agent.run("Ann flies to Paris, France.")).output.model_dump()


def part(name: str, model) -> dict:
    out = asyncio.run(calls(model))
    if name != "anthropic":  # Anthropic has no response_format
        out["native_output"] = asyncio.run(native(model))
    return out


report({name: functools.partial(part, name, model) for name, model in models().items()})
