"""Engines turn a neutral `GenerationRequest` into neutral events; they never know a dialect."""
