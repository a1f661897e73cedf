"""SHA-256 of the shipped model files, pinned in the package: the model loader refuses a
manifest or an artifact that differs (both swapped together included). Rewritten by
``vllm-sentinel train`` whenever it writes the shipped ``models/`` directory."""

PINNED = {
    "text_model.json": "0d4c3830e27255522352b6010dbf1fe8f93e8f757bf4490a02a892eab3f398a8",
    "text_model.npz": "494d0ae957578d9f4fff57ba1ab4fc05923e851ba189c0f5b0fc856fb4d3bb83",
}
