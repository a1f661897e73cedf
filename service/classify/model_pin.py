"""SHA-256 of the shipped model files, pinned in the package: the model loader refuses a
manifest or an artifact that differs (both swapped together included). Rewritten by
``vllm-sentinel train`` whenever it writes the shipped ``models/`` directory."""

PINNED = {
    "text_model.json": "84e2d05205ee09a31976bcd8e728533e3a07db7f7e97c335ec8a025627f8d3fd",
    "text_model.npz": "68489b6e76fc519dd82506a972cfe5f8cae478045d9dd998363e688e276c7d69",
}
