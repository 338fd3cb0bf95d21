"""A model's facts for the listings, from its registry entry and its GGUF header: the
capability rules, and what is claimed of a model without a readable file."""

from __future__ import annotations

from pathlib import Path

from parlance.core.model_facts import Capabilities
from parlance.models.facts import capabilities, facts_of
from parlance.models.registry import ModelSpec
from tests.support.gguf_writer import BASE_KV, STR, TENSORS, U32, write_gguf

LLAMA = {"general.architecture": "llama"}
FIM = {"tokenizer.ggml.fim_pre_token_id": 1, "tokenizer.ggml.fim_suf_token_id": 2,
       "tokenizer.ggml.fim_mid_token_id": 3}


def test_an_embedding_model_is_one_whose_header_names_a_pooling_type():
    assert capabilities({**LLAMA, "llama.pooling_type": 1}, None, None).embeds_only
    assert not capabilities({**LLAMA, "bert.pooling_type": 1}, None, None).embeds_only
    assert not capabilities({"llama.pooling_type": 1}, None, None).embeds_only


def test_thinking_follows_the_served_template_and_training_the_files_own():
    served = "{{ messages }}<think>"
    caps = capabilities(LLAMA, served, "{% if tools %}{{ reasoning_effort }}{% endif %}")
    assert caps == Capabilities(thinks=True, trained_for_tools=True, reasoning_switch="effort",
                                chat_format="generic")
    caps = capabilities(LLAMA, None, "{{ enable_thinking }}")
    assert caps == Capabilities(reasoning_switch="on_off")
    assert capabilities(LLAMA, None, None) == Capabilities()


def test_fill_in_the_middle_needs_all_three_tokens():
    assert capabilities({**LLAMA, **FIM}, None, None).fills_in_middle
    two = dict(list(FIM.items())[:2])
    assert not capabilities({**LLAMA, **two}, None, None).fills_in_middle


def test_the_facts_of_a_gguf_model(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, {**BASE_KV, "general.license": (STR, "mit"),
                      "llama.pooling_type": (U32, 0)}, TENSORS)
    preset = "{{ messages }}<think></think>"  # a preset's template overrides the file's
    spec = ModelSpec(id="tiny", locate=lambda: path, ctx_size=2048, chat_template=preset,
                     sampling={"temperature": 0.2})
    facts = facts_of(spec)
    assert facts.file is not None
    assert (facts.file.architecture, facts.file.organization, facts.file.quantization,
            facts.file.license) == ("llama", "Acme", "Q4_K_M", "mit")
    assert facts.file.size_label == "40" and facts.file.context_length == 4096
    assert facts.file.metadata["general.name"] == "Tiny Test"
    assert facts.file.array_lengths["tokenizer.ggml.tokens"] == 1000
    assert facts.size_bytes == path.stat().st_size
    assert facts.modified_ns == path.stat().st_mtime_ns
    assert facts.chat_template == preset and facts.capabilities.thinks
    assert facts.capabilities.embeds_only
    assert facts.defaults == {"temperature": 0.2, "ctx_size": 2048}
    whole = facts_of(spec, whole_arrays=True)
    assert whole.file is not None and len(whole.file.metadata["tokenizer.ggml.tokens"]) == 1000
    assert whole.file.digest == facts.file.digest


def test_a_model_without_a_file_claims_nothing_of_one():
    def nowhere() -> Path:
        raise FileNotFoundError("served by an upstream server")

    facts = facts_of(ModelSpec(id="remote", locate=nowhere), created=1_700_000_000)
    assert facts.file is None and facts.size_bytes == 0
    assert facts.modified_ns == 1_700_000_000 * 1_000_000_000  # when it was loaded
    assert facts.capabilities == Capabilities() and facts.chat_template is None
    assert facts_of(ModelSpec(id="remote", locate=nowhere)).modified_ns is None


def test_the_chat_format_is_detected_from_the_served_template_or_named():
    harmony = "{% for m in messages %}<|start|>{{ m.role }}<|channel|>final{% endfor %}"
    assert capabilities(LLAMA, harmony, harmony).chat_format == "harmony"
    assert capabilities(LLAMA, harmony, harmony, "hermes").chat_format == "hermes"
