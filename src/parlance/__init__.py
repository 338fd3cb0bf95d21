"""Parlance: a local LLM server that speaks every major streaming dialect faithfully."""

__version__ = "0.1.0"
__all__ = ["__version__"]
