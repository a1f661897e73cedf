"""SHA-256 of the shipped model files, pinned in the package: the model loader refuses a
manifest or an artifact that differs (both swapped together included). Rewritten by
``vllm-sentinel train`` whenever it writes the shipped ``models/`` directory."""

PINNED = {
    "text_model.json": "f10806f87077ca393e9a54abecf9936c77c4850ab5a81a0b6957c0ed2b23dc63",
    "text_model.npz": "5985f61b22f9839bfc35a0968fa173998fb13eb11f6904ee645b54f497f7dc8d",
}
