"""Rerank with a reranker model (a cross-encoder: bge-reranker, jina-reranker,
Qwen3-Reranker converted with its head): each (query, document) pair is one sequence
of the embedding context in rank pooling, and its score is the first output of the
model's classifier head, raw (it may be negative), as llama-server answers.

A pair is laid out as llama-server lays it out (`format_prompt_rerank`): through the
GGUF's `tokenizer.chat_template.rerank` with `{query}` and `{document}` put in when the
model has one (special tokens read), else `[BOS] query [EOS] [SEP] document [EOS]`,
each marker only where the vocabulary adds it (EOS falling back to SEP).
"""

from __future__ import annotations

import llama_cpp

from parlance.core.errors import ContextOverflow
from parlance.core.rerank import RerankRequest
from parlance.engines.llamacpp.model import LlamaModel

TEMPLATE_KEY = "tokenizer.chat_template.rerank"


def pair_tokens(model: LlamaModel, query: str, document: str) -> list[int]:
    template = model.meta(TEMPLATE_KEY)
    if template is not None:
        text = template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(text, add_special=False, parse_special=True)
    vocab = model.vocab
    eos = llama_cpp.llama_vocab_eos(vocab)
    if eos == llama_cpp.LLAMA_TOKEN_NULL:
        eos = llama_cpp.llama_vocab_sep(vocab)
    add_eos = llama_cpp.llama_vocab_get_add_eos(vocab)
    tokens: list[int] = []
    if llama_cpp.llama_vocab_get_add_bos(vocab):
        tokens.append(llama_cpp.llama_vocab_bos(vocab))
    tokens += model.tokenize(query, add_special=False, parse_special=False)
    if add_eos:
        tokens.append(eos)
    if llama_cpp.llama_vocab_get_add_sep(vocab):
        tokens.append(llama_cpp.llama_vocab_sep(vocab))
    tokens += model.tokenize(document, add_special=False, parse_special=False)
    if add_eos:
        tokens.append(eos)
    return tokens


def ranking_tokens(model: LlamaModel, request: RerankRequest, limit: int) -> list[list[int]]:
    """Each pair's tokens, refused when one is over what the embedding context pools in
    one micro-batch (`limit`). Runs on a worker thread."""
    pairs = [pair_tokens(model, request.query, d) for d in request.documents]
    for index, tokens in enumerate(pairs):
        if len(tokens) > limit:
            raise ContextOverflow(
                f"This reranker reads at most {limit} tokens per query and document "
                f"together, but document {index} makes {len(tokens)} with the query.",
                param="documents", code="context_length_exceeded")
    return pairs
