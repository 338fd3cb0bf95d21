"""Models served by OpenAI-compatible upstream servers (vLLM, SGLang, llama-server,
Ollama's /v1, LM Studio, another Parlance), behind the same engine seam as
llama.cpp: a pool of replicas per model, balanced, health-checked and retried."""

from parlance.engines.upstream.engine import UpstreamEngine, UpstreamGeneration
from parlance.engines.upstream.fleet import Fleet, FleetSettings
from parlance.engines.upstream.replica import ClientSettings, Replica, ReplicaConfig

__all__ = ["ClientSettings", "Fleet", "FleetSettings", "Replica", "ReplicaConfig",
           "UpstreamEngine", "UpstreamGeneration"]
