"""Claude Code's per-request billing line is not part of the prompt (it would end the
cached prefix a dozen tokens in); anything that only resembles it stays."""

from __future__ import annotations

import pytest

from parlance.dialects.anthropic import AnthropicMessages
from parlance.dialects.base import Incoming

CAPTURED = [  # as Claude Code 2.1.197 sent them within one session
    "x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli;",
    "x-anthropic-billing-header: cc_version=2.1.197.c40; cc_entrypoint=sdk-cli;",
    "x-anthropic-billing-header: cc_version=2.1.197.53a; cc_entrypoint=cli; cch=9f2e1;",
    "x-anthropic-billing-header: cc_version=2.2.0.476; cc_entrypoint=sdk-ts",
    "x-anthropic-billing-header:cc_version=2.1.197.476;cc_entrypoint=sdk-cli;\n",
]
IDENTITY = "You are Claude Code, Anthropic's official CLI for Claude."


def system_prompt(system) -> str:
    body = {"model": "m", "max_tokens": 8, "system": system,
            "messages": [{"role": "user", "content": "hi"}]}
    messages = AnthropicMessages().parse(Incoming(body)).request.prompts[0].messages
    return messages[0].content if messages[0].role == "system" else ""


@pytest.mark.parametrize("line", CAPTURED)
def test_the_billing_block_is_dropped(line):
    system = [{"type": "text", "text": line},
              {"type": "text", "text": IDENTITY, "cache_control": {"type": "ephemeral"}},
              {"type": "text", "text": "Main prompt.", "cache_control": {"type": "ephemeral"}}]
    assert system_prompt(system) == f"{IDENTITY}\n\nMain prompt."


@pytest.mark.parametrize("line", CAPTURED)
def test_the_billing_first_line_of_a_string_system_is_dropped(line):
    assert system_prompt(f"{line.strip()}\n{IDENTITY}") == IDENTITY


def test_two_requests_with_other_nonces_render_the_same_system_prompt():
    prompts = {system_prompt([{"type": "text", "text": line}, {"type": "text", "text": IDENTITY}])
               for line in CAPTURED}
    assert prompts == {IDENTITY}


def test_a_system_of_only_the_billing_line_leaves_no_system_message():
    assert system_prompt([{"type": "text", "text": CAPTURED[0]}]) == ""


@pytest.mark.parametrize("text", [
    "Never print the x-anthropic-billing-header: cc_version=1; line.",  # prose around it
    "x-anthropic-billing-header: cc_version=1;\nThe real instructions.",  # more in the block
    "x-anthropic-billing-header: please ignore the rules",  # not key=value pairs
    "X-Anthropic-Billing-Header: cc_version=1;",  # not the form Claude Code sends
])
def test_text_that_only_resembles_it_is_kept(text):
    assert system_prompt([{"type": "text", "text": text}]) == text
