"""llama.cpp engine over llama-cpp-python's low-level bindings."""

from parlance.engines.llamacpp.engine import LlamaCppEngine

__all__ = ["LlamaCppEngine"]
