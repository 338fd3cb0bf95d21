"""The stateful encoder contract: a `Stateful` dialect's encoders say what their stream
amounts to (`outcome()`), which the server stores, and an encoder that cannot is
refused by name rather than skipped."""

from __future__ import annotations

import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.dialects.base import CallFacts, Incoming, Stateful, StatefulEncoder, outcome
from parlance.dialects.lmstudio import LMStudioChat
from parlance.dialects.openai.chat import OpenAIChat
from parlance.dialects.openai.responses import OpenAIResponses

SERVED = CallFacts("m", ())


@pytest.mark.parametrize("dialect", [OpenAIResponses(), LMStudioChat()],
                         ids=lambda d: type(d).__name__)
def test_a_stateful_dialects_encoder_reports_its_outcome(dialect):
    assert isinstance(dialect, Stateful)
    encoder = dialect.encoder(dialect.parse(Incoming({"model": "m", "input": "hi"})), SERVED)
    assert isinstance(encoder, StatefulEncoder)
    encoder.open()
    encoder.feed(TextDelta("Hello"))
    cut_short = outcome(encoder)  # the client left before the end
    for event in (Finish(FinishReason.STOP), Usage(3, 1)):
        encoder.feed(event)
    encoder.close()
    finished = outcome(encoder)
    assert cut_short != finished
    assert "Hello" in str(finished)


def test_an_encoder_without_an_outcome_is_refused():
    dialect = OpenAIChat()
    call = dialect.parse(Incoming({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    with pytest.raises(TypeError, match="ChatEncoder is not a StatefulEncoder"):
        outcome(dialect.encoder(call, SERVED))
