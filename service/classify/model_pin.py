"""SHA-256 of the shipped model files, pinned in the package: the model loader refuses a
manifest or an artifact that differs (both swapped together included). Rewritten by
``vllm-sentinel train`` whenever it writes the shipped ``models/`` directory."""

PINNED = {
    "text_model.json": "7b5e4afffc44e51d018005729840ec6fa02ef2d6581008eb4dff194f6c473e64",
    "text_model.npz": "b2a2965665175b7e2a26efde8899c7913e5613b0609120b6f719a59ef3f035d7",
}
