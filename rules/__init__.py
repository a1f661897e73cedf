"""The shipped rules (signatures, stages, facts, CUDA table, playbook, benign lines) as
the data package ``vllm_sentinel_data.rules`` (see ``setup.py``); this directory holds
YAML only and stays at the top of the tree."""
