"""llama-server's own endpoints beside the OpenAI ones: `/tokenize`, `/detokenize`,
`/apply-template` (tokens.py), rerank (rerank.py), `/infill` (infill.py), in its
shapes and its error envelope."""

from __future__ import annotations

from parlance.dialects.shared.llama_server import render_error

PATHS = ("/infill", "/tokenize", "/detokenize", "/apply-template", "/rerank", "/reranking",
         "/v1/rerank", "/v1/reranking", "/v2/rerank")

__all__ = ["PATHS", "render_error"]
