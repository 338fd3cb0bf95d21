"""Ollama's native API (`/api/chat`, `/api/generate`, the model endpoints, embeddings),
NDJSON streams. See reference stream-contracts.md part D.

`errors.py` is the error envelope every Ollama endpoint shares."""

from __future__ import annotations

from parlance.dialects.ollama import errors

render_error = errors.render_error
