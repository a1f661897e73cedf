"""Pin the shipped model in the package: rewrite :mod:`service.classify.model_pin`.

The model loader refuses a shipped ``models/`` file whose SHA-256 differs from the digest
pinned there (:func:`service.classify.loader.check_pin`); ``vllm-sentinel train`` calls
:func:`write_pin` whenever it writes the shipped directory, and nothing else does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from service.classify import model_pin

__all__ = ["PIN_FILE", "write_pin"]

PIN_FILE = Path(model_pin.__file__).resolve()


def write_pin(
    models_dir: Path, names: tuple[str, ...] = tuple(model_pin.PINNED), pin_file: Path = PIN_FILE
) -> None:
    """Pin the files ``names`` of ``models_dir``: their digests replace ``PINNED`` in
    ``pin_file`` (the text before it, the module's docstring, is kept)."""
    lines = [
        f'    "{n}": "{hashlib.sha256((models_dir / n).read_bytes()).hexdigest()}",' for n in names
    ]
    text = pin_file.read_text(encoding="utf-8")
    head = text[: text.index("PINNED = {")]
    pin_file.write_text(head + "PINNED = {\n" + "\n".join(lines) + "\n}\n", encoding="utf-8")
