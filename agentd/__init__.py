"""agentd: per-node agent for GPU clusters (fabric health, metrics, NCCL files)."""

__version__ = "0.1.0"
