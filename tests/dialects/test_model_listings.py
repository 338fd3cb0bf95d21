"""The model listings of Ollama and LM Studio rendered from a model's facts, without
files or HTTP: each API's own names for the same capabilities, and nothing claimed
of a model whose file could not be read."""

from __future__ import annotations

from parlance.core.model_facts import Capabilities, FileFacts, ModelFacts
from parlance.dialects.lmstudio import models as lmstudio
from parlance.dialects.ollama import models as ollama

FILE = FileFacts(architecture="llama", name="Tiny", organization="Acme",
                 quantization="Q8_0", bits_per_weight=8.504, parameter_count=134_515_008,
                 size_label="135M", context_length=8192, license="apache-2.0",
                 digest="sha256:ab", metadata={"general.architecture": "llama",
                                               "general.name": "Tiny"},
                 array_lengths={"tokenizer.ggml.tokens": 49152})
FACTS = ModelFacts(FILE, 1000, 1_700_000_000_000_000_000, "<think>", {"ctx_size": 2048},
                   Capabilities(thinks=True, fills_in_middle=True, trained_for_tools=True,
                                reasoning_switch="on_off"))
PLAIN = ModelFacts(None, 0, None, None, {"ctx_size": None}, Capabilities())


def test_ollama_names_the_capabilities_its_own_way():
    assert ollama.capabilities(FACTS.capabilities) == ["completion", "tools", "thinking",
                                                       "insert"]
    assert ollama.capabilities(Capabilities(embeds_only=True, thinks=True)) == ["embedding"]
    assert ollama.capabilities(PLAIN.capabilities) == ["completion", "tools"]


def test_ollama_entries_from_the_facts():
    entry = ollama.tag_entry("tiny:latest", FACTS)
    assert entry["digest"] == "sha256:ab" and entry["size"] == 1000
    assert entry["modified_at"] == "2023-11-14T22:13:20Z"
    assert entry["details"] == {"parent_model": "", "format": "gguf", "family": "llama",
                                "families": ["llama"], "parameter_size": "134.52M",
                                "quantization_level": "Q8_0"}
    shown = ollama.show("tiny:latest", FACTS, verbose=False)
    assert shown["license"] == "apache-2.0" and shown["template"] == "<think>"
    assert shown["model_info"] == {"general.architecture": "llama",
                                   "general.parameter_count": 134_515_008,
                                   "tokenizer.ggml.tokens": []}
    assert shown["parameters"] == "num_ctx                        2048"
    plain = ollama.show("remote:latest", PLAIN, verbose=True)
    assert plain["model_info"] == {} and "license" not in plain and "template" not in plain
    assert ollama.ps_entry("remote:latest", PLAIN, 5, "never", 512)["details"]["format"] == ""


def test_lm_studio_objects_from_the_facts():
    listed = lmstudio.model_object("tiny", FACTS, 999, None)
    assert listed["publisher"] == "Acme" and listed["display_name"] == "Tiny"
    assert listed["quantization"] == {"name": "Q8_0", "bits_per_weight": 8.5}
    assert listed["params_string"] == "135M" and listed["max_context_length"] == 8192
    assert listed["size_bytes"] == 999
    assert listed["capabilities"] == {"vision": False, "trained_for_tool_use": True,
                                      "reasoning": {"allowed_options": ["off", "on"],
                                                    "default": "on"}}
    effort = lmstudio.capabilities(Capabilities(reasoning_switch="effort"))
    assert effort["reasoning"]["allowed_options"] == ["off", "low", "medium", "high"]
    plain = lmstudio.model_object("remote", PLAIN, 0, {"context_length": 4096})
    assert (plain["publisher"], plain["quantization"], plain["max_context_length"]) == (
        "local", None, 4096)
    assert plain["capabilities"] == {"vision": False, "trained_for_tool_use": False}
