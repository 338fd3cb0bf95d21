"""OpenAI's APIs: Chat Completions (`chat.py`), legacy Completions (`completions.py`),
embeddings (`embeddings.py`) and Responses (`responses/`). `common.py` holds what
Chat and Completions share, `tools.py` Chat's tool and format fields, `errors.py` the
error envelope and statuses every OpenAI endpoint answers with.

Kept empty so that importing one API does not import the others."""
