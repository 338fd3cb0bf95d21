from parlance.core.accumulate import accumulate
from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Failed,
    Finish,
    FinishReason,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)


def test_accumulate_when_text_and_logprobs_then_concatenated_per_choice():
    lp = TokenLogprob("Hi", -0.1, (72, 105))
    result = accumulate([
        PromptProgress(3, 3), TextDelta("Hi", logprobs=(lp,)), TextDelta(" there", index=1),
        TextDelta("!", logprobs=()), Finish(FinishReason.STOP), Finish(FinishReason.LENGTH, 1),
        Usage(5, 3),
    ])
    first, second = result.ordered_choices()
    assert (first.text, first.finish_reason, first.logprobs) == ("Hi!", FinishReason.STOP, [lp])
    assert (second.text, second.finish_reason, second.logprobs) == (
        " there", FinishReason.LENGTH, None)
    assert result.usage == Usage(5, 3)


def test_accumulate_when_tool_call_fragments_then_arguments_joined():
    result = accumulate([
        ReasoningDelta("think"), ToolCallStart("call_1", "f"), ToolCallArgs('{"a"'),
        ToolCallArgs(":1}"), ToolCallEnd(), Finish(FinishReason.TOOL_CALLS),
    ])
    choice = result.choices[0]
    assert choice.reasoning == "think"
    assert [(c.call_id, c.name, c.arguments) for c in choice.tool_calls] == [
        ("call_1", "f", '{"a":1}')]


def test_accumulate_when_failed_then_error_kept():
    error = EngineFailure("boom")
    assert accumulate([TextDelta("x"), Failed(error)]).error is error


def test_usage_throughput_after_first_token():
    assert Usage(1, 11, 0.1, 2.0).throughput_after_first_token == 5.0
    assert Usage(1, 1, 0.1, 0.0).throughput_after_first_token is None
