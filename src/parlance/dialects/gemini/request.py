"""The GenerateContentRequest at the wire and its neutral form.

Field names are read in lowerCamelCase (what the SDKs send) or snake_case (the proto
names, which Google's own REST examples use). The model comes from the URL, never the
body. Fields Parlance cannot act on but whose absence changes nothing in the answer
(`safetySettings`, tools of other kinds such as `googleSearch`, `responseModalities`)
are accepted and ignored; ones that would change the answer are refused by name.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from parlance.core.errors import InvalidRequest, NotImplementedHere
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.tools import (
    ReasoningEffort,
    ReasoningRequest,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
)
from parlance.dialects.gemini.schema import json_schema
from parlance.dialects.gemini.thoughts import reasoning_of
from parlance.dialects.shared.wire import Probability, WireModel


class GeminiModel(WireModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True,
                              validate_by_alias=True)


class FunctionCallIn(GeminiModel):
    id: str | None = None
    name: Annotated[str, Field(min_length=1)]
    args: dict[str, Any] | None = None


class FunctionResponseIn(GeminiModel):
    id: str | None = None
    name: Annotated[str, Field(min_length=1)]
    response: dict[str, Any] | None = None


class PartIn(GeminiModel):
    """One part: a single data field (`text`, `functionCall`, …) plus flags."""

    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    function_call: FunctionCallIn | None = None
    function_response: FunctionResponseIn | None = None
    inline_data: dict[str, Any] | None = None
    file_data: dict[str, Any] | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None


class ContentIn(GeminiModel):
    role: str | None = None
    parts: list[PartIn] = []


class FunctionDeclarationIn(GeminiModel):
    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    parameters_json_schema: Any = None


class ToolIn(GeminiModel):
    """Function declarations; other tool kinds (`googleSearch`, `codeExecution`, …) are
    Google's own services and are ignored."""

    function_declarations: list[FunctionDeclarationIn] | None = None


class FunctionCallingConfigIn(GeminiModel):
    mode: str | None = None
    allowed_function_names: list[str] | None = None


class ToolConfigIn(GeminiModel):
    function_calling_config: FunctionCallingConfigIn | None = None


class ThinkingConfigIn(GeminiModel):
    include_thoughts: bool | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None


class GenerationConfigIn(GeminiModel):
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[float, Field(ge=0)] | None = None  # the Python SDK sends a float
    candidate_count: Annotated[int, Field(ge=1, le=8)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    stop_sequences: list[str] | None = None
    response_mime_type: str | None = None
    response_schema: dict[str, Any] | None = None
    response_json_schema: Any = None
    thinking_config: ThinkingConfigIn | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_logprobs: bool | None = None
    logprobs: Annotated[int, Field(ge=0, le=20)] | None = None


class GenerateContentRequest(GeminiModel):
    contents: list[ContentIn] | None = None
    system_instruction: ContentIn | None = None
    tools: list[ToolIn] | None = None
    tool_config: ToolConfigIn | None = None
    generation_config: GenerationConfigIn | None = None
    safety_settings: list[dict[str, Any]] | None = None  # accepted, ignored
    cached_content: str | None = None


class CountTokensRequest(GeminiModel):
    """`:countTokens`: `contents`, or a whole `generateContentRequest` (whose tools and
    system instruction count too)."""

    contents: list[ContentIn] | None = None
    generate_content_request: GenerateContentRequest | None = None


def model_name(path_model: str) -> str:
    """The model a URL names: `gemini-2.5-flash` or `models/gemini-2.5-flash`."""
    return path_model.removeprefix("models/")


# -- contents -> messages ----------------------------------------------------------


def _no_media(where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: inline and file data are not supported by this "
                          "server's models (text input only).", param=where)


def _tool_output(response: dict[str, Any] | None) -> str:
    """What a function said: Gemini CLI's `{"output": text}` / `{"error": text}` as
    that text, any other response object as its JSON."""
    response = response or {}
    if len(response) == 1:
        (key, value), = response.items()
        if key in ("output", "result", "content") and isinstance(value, str):
            return value
        if key == "error" and isinstance(value, str):
            return f"Error: {value}"
    return json.dumps(response, ensure_ascii=False)


def _code_text(part: PartIn) -> str | None:
    """Code execution parts replayed from another server, as the text they showed."""
    if part.executable_code is not None:
        return f"```\n{part.executable_code.get('code', '')}\n```"
    if part.code_execution_result is not None:
        return str(part.code_execution_result.get("output", ""))
    return None


class _Calls:
    """The ids of function calls: the client's where it sent them, else one made from
    the call's place in the conversation (stable from turn to turn, so the prompt's
    prefix stays the same); a response without an id answers the oldest unanswered
    call of its name."""

    def __init__(self) -> None:
        self.unanswered: list[tuple[str, str]] = []  # (id, name)

    def made(self, call: FunctionCallIn, turn: int, k: int) -> str:
        call_id = call.id or f"call_{turn}_{k}"
        self.unanswered.append((call_id, call.name))
        return call_id

    def answered(self, response: FunctionResponseIn) -> str | None:
        for n, (call_id, name) in enumerate(self.unanswered):
            if (call_id == response.id) if response.id else (name == response.name):
                del self.unanswered[n]
                return call_id
        return response.id


def _user_turn(content: ContentIn, where: str, calls: _Calls) -> list[Message]:
    out: list[Message] = []
    texts: list[str] = []
    for j, part in enumerate(content.parts):
        at = f"{where}.parts[{j}]"
        if part.inline_data is not None or part.file_data is not None:
            raise _no_media(at)
        if part.function_response is not None:
            if texts:
                out.append(Message("user", "\n".join(texts)))
                texts = []
            response = part.function_response
            out.append(Message("tool", _tool_output(response.response), name=response.name,
                               tool_call_id=calls.answered(response)))
        elif part.text is not None and not part.thought:
            texts.append(part.text)
        elif (code := _code_text(part)) is not None:
            texts.append(code)
    if texts or not out:
        out.append(Message("user", "\n".join(texts)))
    return out


def _model_turn(content: ContentIn, turn: int, where: str, calls: _Calls) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    signed: list[str] = []
    made: list[ToolCall] = []
    for j, part in enumerate(content.parts):
        at = f"{where}.parts[{j}]"
        if part.inline_data is not None or part.file_data is not None:
            raise _no_media(at)
        if part.thought_signature and (carried := reasoning_of(part.thought_signature)):
            signed.append(carried)
        if part.function_call is not None:
            call = part.function_call
            made.append(ToolCall(calls.made(call, turn, len(made)), call.name,
                                 json.dumps(call.args or {}, ensure_ascii=False)))
        elif part.function_response is not None:
            raise InvalidRequest(f"{at}: a functionResponse belongs in a user turn, not a "
                                 "model turn.", param=f"{at}.functionResponse")
        elif part.text is not None:
            (thoughts if part.thought else texts).append(part.text)
        elif (code := _code_text(part)) is not None:
            texts.append(code)
    reasoning = "".join(thoughts) or "".join(signed)
    return Message("assistant", "".join(texts), tool_calls=tuple(made),
                   reasoning=reasoning or None)


def _merged(messages: list[Message]) -> list[Message]:
    """Consecutive user turns are one turn (templates may insist on alternation)."""
    out: list[Message] = []
    for m in messages:
        last = out[-1] if out else None
        if last is not None and m.role == last.role == "user":
            out[-1] = Message("user", f"{last.content}\n\n{m.content}")
        else:
            out.append(m)
    return out


def system_text(content: ContentIn | None) -> str:
    if content is None:
        return ""
    for j, part in enumerate(content.parts):
        if part.inline_data is not None or part.file_data is not None:
            raise _no_media(f"systemInstruction.parts[{j}]")
    return "\n".join(p.text for p in content.parts if p.text is not None and not p.thought)


def conversation(contents: list[ContentIn], system: ContentIn | None,
                 where: str = "contents") -> tuple[Message, ...]:
    messages: list[Message] = []
    if instruction := system_text(system):
        messages.append(Message("system", instruction))
    calls = _Calls()
    for i, content in enumerate(contents):
        at = f"{where}[{i}]"
        role = content.role or "user"
        if role == "model":
            messages.append(_model_turn(content, i, at, calls))
        elif role in ("user", "function", "tool"):
            messages.extend(_user_turn(content, at, calls))
        else:
            raise InvalidRequest(f"Invalid value at '{at}.role' ({role!r}): Please use a "
                                 "valid role: user, model.", param=f"{at}.role")
    return tuple(_merged(messages))


# -- tools ---------------------------------------------------------------------------


def tools(req: GenerateContentRequest) -> tuple[ToolSpec, ...]:
    specs = []
    seen: set[str] = set()
    for i, tool in enumerate(req.tools or ()):
        for j, f in enumerate(tool.function_declarations or ()):
            at = f"tools[{i}].functionDeclarations[{j}]"
            if f.name in seen:
                raise InvalidRequest(f"Duplicate function declaration found: {f.name}.",
                                     param=f"{at}.name")
            seen.add(f.name)
            if f.parameters is not None and f.parameters_json_schema is not None:
                raise InvalidRequest(f"{at}: set parameters or parametersJsonSchema, not "
                                     "both.", param=f"{at}.parametersJsonSchema")
            if f.parameters_json_schema is not None:
                if not isinstance(f.parameters_json_schema, dict):
                    raise InvalidRequest(f"Invalid value at '{at}.parametersJsonSchema': a "
                                         "JSON Schema object.",
                                         param=f"{at}.parametersJsonSchema")
                schema, param = f.parameters_json_schema, f"{at}.parametersJsonSchema"
            elif f.parameters is not None:
                schema = json_schema(f.parameters, f"{at}.parameters")
                param = f"{at}.parameters"
            else:
                schema, param = {"type": "object", "properties": {}}, f"{at}.parameters"
            specs.append(ToolSpec(f.name, f.description or "", schema, param=param))
    return tuple(specs)


_CONFIG = "toolConfig.functionCallingConfig"


def tool_choice(req: GenerateContentRequest,
                specs: tuple[ToolSpec, ...]) -> tuple[ToolChoice, tuple[ToolSpec, ...]]:
    """The neutral choice and the tools the model is offered. ANY is a forced call
    (grammar-guaranteed, as in every dialect), limited to `allowedFunctionNames`
    (exactly that function when it names one); AUTO and VALIDATED let the model
    answer or call one of the allowed functions; NONE calls nothing."""
    config = req.tool_config.function_calling_config if req.tool_config else None
    mode = ((config.mode if config else None) or "AUTO").upper()
    allowed = config.allowed_function_names if config else None
    if mode not in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"):
        raise InvalidRequest(f"Invalid value at '{_CONFIG}.mode' ({mode!r}): one of AUTO, "
                             "ANY, NONE, VALIDATED.", param=f"{_CONFIG}.mode")
    if mode == "NONE":
        return ToolChoice("none"), specs
    if allowed:
        declared = {t.name for t in specs}
        for k, name in enumerate(allowed):
            if name not in declared:
                raise InvalidRequest(
                    f"Invalid value at '{_CONFIG}.allowedFunctionNames[{k}]': no function "
                    f"named '{name}' is declared in tools.",
                    param=f"{_CONFIG}.allowedFunctionNames[{k}]")
        specs = tuple(t for t in specs if t.name in allowed)
    if mode == "ANY":
        if not specs:
            raise InvalidRequest(f"{_CONFIG}.mode ANY needs function declarations in "
                                 "tools.", param=f"{_CONFIG}.mode")
        if len(specs) == 1:
            return ToolChoice("named", specs[0].name), specs
        return ToolChoice("required"), specs
    return ToolChoice("auto" if specs else "none"), specs


# -- generationConfig ------------------------------------------------------------------

_LEVELS = {"MINIMAL": ReasoningEffort.MINIMAL, "LOW": ReasoningEffort.LOW,
           "MEDIUM": ReasoningEffort.MEDIUM, "HIGH": ReasoningEffort.HIGH}
_THINKING = "generationConfig.thinkingConfig"


def reasoning(config: GenerationConfigIn | None) -> ReasoningRequest | None:
    """`thinkingBudget` 0 turns thinking off, -1 leaves the amount to the model, N caps
    it; `thinkingLevel` says how hard. Each is a preference (best effort), as Gemini
    CLI sends a thinking config to every model and a model without thinking answers."""
    thinking = config.thinking_config if config else None
    if thinking is None:
        return None
    budget = thinking.thinking_budget
    if budget is not None and budget < -1:
        raise InvalidRequest(f"Invalid value at '{_THINKING}.thinkingBudget' ({budget}): "
                             "-1 (automatic), 0 (off) or a number of tokens.",
                             param=f"{_THINKING}.thinkingBudget")
    if budget == 0:
        return ReasoningRequest(ReasoningEffort.NONE, param=f"{_THINKING}.thinkingBudget",
                                best_effort=True)
    cap = budget if budget is not None and budget > 0 else None
    level = thinking.thinking_level
    if level is not None and level.upper() not in (*_LEVELS, "THINKING_LEVEL_UNSPECIFIED"):
        raise InvalidRequest(f"Invalid value at '{_THINKING}.thinkingLevel' ({level!r}): "
                             "one of MINIMAL, LOW, MEDIUM, HIGH.",
                             param=f"{_THINKING}.thinkingLevel")
    if level is not None and level.upper() in _LEVELS:
        return ReasoningRequest(_LEVELS[level.upper()], param=f"{_THINKING}.thinkingLevel",
                                best_effort=True, budget_tokens=cap)
    if budget is None and not thinking.include_thoughts:
        return None
    return ReasoningRequest(ReasoningEffort.ON, param=_THINKING, best_effort=True,
                            budget_tokens=cap)


def shows_thoughts(config: GenerationConfigIn | None) -> bool:
    thinking = config.thinking_config if config else None
    return bool(thinking and thinking.include_thoughts)


_GEN = "generationConfig"


def response_format(config: GenerationConfigIn | None) -> ResponseFormat | None:
    """`responseMimeType: application/json` with `responseSchema` (converted) or
    `responseJsonSchema`: JSON valid for the schema, grammar-enforced; without a
    schema, any JSON."""
    if config is None:
        return None
    mime = (config.response_mime_type or "text/plain").lower()
    schema_given = (config.response_schema is not None
                    or config.response_json_schema is not None)
    if config.response_schema is not None and config.response_json_schema is not None:
        raise InvalidRequest("responseSchema and responseJsonSchema cannot both be set.",
                             param=f"{_GEN}.responseJsonSchema")
    if mime == "text/x.enum":
        raise NotImplementedHere("responseMimeType text/x.enum is not supported by this "
                                 "server; ask for application/json with an enum schema.",
                                 param=f"{_GEN}.responseMimeType")
    if mime == "text/plain":
        if schema_given:
            raise InvalidRequest("A response schema needs responseMimeType "
                                 "application/json.", param=f"{_GEN}.responseMimeType")
        return None
    if mime != "application/json":
        raise InvalidRequest(f"Invalid value at '{_GEN}.responseMimeType' ({mime!r}): "
                             "text/plain or application/json.",
                             param=f"{_GEN}.responseMimeType")
    if config.response_json_schema is not None:
        if not isinstance(config.response_json_schema, dict):
            raise InvalidRequest(f"Invalid value at '{_GEN}.responseJsonSchema': a JSON "
                                 "Schema object.", param=f"{_GEN}.responseJsonSchema")
        return ResponseFormat("json_schema", config.response_json_schema, strict=True,
                              param=f"{_GEN}.responseJsonSchema")
    if config.response_schema is not None:
        schema = json_schema(config.response_schema, f"{_GEN}.responseSchema")
        return ResponseFormat("json_schema", schema, strict=True,
                              param=f"{_GEN}.responseSchema")
    return ResponseFormat("json_object", param=f"{_GEN}.responseMimeType")


def sampling(config: GenerationConfigIn | None) -> tuple[SamplingParams, frozenset[str]]:
    if config is None:
        return SamplingParams(), frozenset()
    chosen = {name for name, value in (
        ("temperature", config.temperature), ("top_p", config.top_p),
        ("top_k", config.top_k), ("seed", config.seed),
        ("presence_penalty", config.presence_penalty),
        ("frequency_penalty", config.frequency_penalty)) if value is not None}
    params = SamplingParams(
        temperature=1.0 if config.temperature is None else config.temperature,
        top_p=1.0 if config.top_p is None else config.top_p,
        top_k=int(config.top_k or 0),
        seed=config.seed,
        presence_penalty=config.presence_penalty or 0.0,
        frequency_penalty=config.frequency_penalty or 0.0)
    return params, frozenset(chosen)


def logprobs(config: GenerationConfigIn | None) -> int | None:
    """`responseLogprobs` turns them on; `logprobs` is how many alternatives per step."""
    if config is None or not config.response_logprobs:
        return None
    return config.logprobs or 0


def generation_request(req: GenerateContentRequest, model: str, *,
                       counting: bool = False) -> GenerationRequest:
    if not req.contents:
        raise InvalidRequest("* GenerateContentRequest.contents: contents is not "
                             "specified", param="contents")
    if req.cached_content:
        raise NotImplementedHere("cachedContent is not supported by this server (it "
                                 "caches prompts by itself; send the contents instead).",
                                 param="cachedContent")
    config = req.generation_config
    choice, offered = tool_choice(req, tools(req))
    params, chosen = sampling(config)
    last = req.contents[-1]
    prefill = (last.role == "model"
               and not any(p.function_call is not None for p in last.parts))
    return GenerationRequest(
        model=model,
        prompts=(ChatInput(conversation(req.contents, req.system_instruction)),),
        sampling=params,
        sampling_set=chosen,
        max_tokens=config.max_output_tokens if config else None,
        continue_final=prefill,
        stop=tuple(s for s in (config.stop_sequences if config else None) or () if s),
        logprobs=None if counting else logprobs(config),
        n=(config.candidate_count or 1) if config else 1,
        tools=offered,
        tool_choice=choice,
        response_format=response_format(config),
        reasoning=reasoning(config),
    )


def count_request(req: CountTokensRequest, model: str) -> GenerationRequest:
    if req.generate_content_request is not None:
        return generation_request(req.generate_content_request, model, counting=True)
    # Built without validating again: `contents` is validated already, and a list past
    # LIST_SLICE validated through `__init__` would come back as a copy (a warning).
    return generation_request(GenerateContentRequest.model_construct(contents=req.contents),
                              model, counting=True)
