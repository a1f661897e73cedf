"""vllm-sentinel: classify vLLM container failures from their logs and page the right owner."""

__version__ = "0.1.0"
