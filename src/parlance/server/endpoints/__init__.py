"""The plain (non-generation) endpoints: model listings and management, metrics, embeddings,
token counting, stored responses."""
