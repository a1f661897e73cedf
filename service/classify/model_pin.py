"""SHA-256 of the shipped model files, pinned in the package: the model loader refuses a
manifest or an artifact that differs (both swapped together included). Rewritten by
``vllm-sentinel train`` whenever it writes the shipped ``models/`` directory."""

PINNED = {
    "text_model.json": "940fbf35039218177a114ec50cbf71ee2b23a9fd326443285eb07b3fbdd77224",
    "text_model.npz": "5985f61b22f9839bfc35a0968fa173998fb13eb11f6904ee645b54f497f7dc8d",
}
