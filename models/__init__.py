"""The shipped text model (artifact, manifest, model card) as the data package
``vllm_sentinel_data.models`` (see ``setup.py``); ``vllm-sentinel train`` rewrites the
files of this directory."""
