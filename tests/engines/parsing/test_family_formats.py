"""Which format each stored real template is detected as (formats.py, llama.cpp's way:
strings the template holds), for the families of issue 38's second batch, and what the
registry says of them (Gemma 3: no native tools, the built-in prompt kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlance.engines.parsing.formats import (
    family_table,
    family_table_markdown,
    format_for_template,
    format_named,
)

TEMPLATES = Path(__file__).parents[2] / "data" / "templates"
DETECTED = {
    "google-gemma-4-31B-it": "gemma4",
    "lenml-gemma3": "gemma3",
    "llama-cpp-microsoft-Phi-4-mini-instruct": "phi4",
    "LFM2-8B-A1B": "lfm2",
    "NVIDIA-Nemotron-Nano-v2": "nemotron_v2",
    "Apertus-8B-Instruct": "apertus",
    "deepseek-ai-DeepSeek-V3.2": "deepseek_v3_2",
    "deepseek-ai-DeepSeek-V3.1": "deepseek_v3_1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek_r1",
    "lenml-deepseek_v3": "deepseek_r1",
    "mistralai-Ministral-3-14B-Reasoning-2512": "magistral",
}


@pytest.mark.parametrize(("template", "name"), DETECTED.items())
def test_the_template_is_detected_as_its_family(template, name):
    assert format_for_template((TEMPLATES / f"{template}.jinja").read_text()).name == name


def test_gemma3_has_no_native_tools_and_the_table_says_so():
    gemma3 = format_named("gemma3")
    assert gemma3.native_tools is False and gemma3.syntax.name == "hermes"
    row = next(r for r in family_table() if r["format"] == "gemma3")
    assert row["tools"] == "built-in prompt (Hermes markup)"
    assert row["forced calls"] == "Hermes markup"


@pytest.mark.parametrize(("name", "tools", "reasoning"), [
    ("gemma4", "`<|tool_call>`", "`<|channel>thought` … `<channel|>`"),
    ("apertus", "`<|tools_prefix|>`", "`<|inner_prefix|>` … `<|inner_suffix|>`"),
    ("deepseek_v3_2", "`<｜DSML｜function_calls>`", "`<think>` … `</think>`"),
])
def test_the_docs_table_shows_each_family_in_its_own_markup(name, tools, reasoning):
    row = next(r for r in family_table() if r["format"] == name)
    assert (row["tools"], row["reasoning"], row["forced calls"]) == (
        tools, reasoning, "in its own markup")
    assert f"| {name} |" in family_table_markdown()
