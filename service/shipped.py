"""Where the shipped data is: the top-level ``rules/`` and ``models/`` directories of the
source tree, installed as the data packages ``vllm_sentinel_data.rules`` and
``vllm_sentinel_data.models`` (``setup.py`` maps them) and found with
:mod:`importlib.resources`.

A wheel carries both inside site-packages; an editable install (``pip install -e .``, what
``make`` does) maps the packages onto the tree itself, so ``vllm-sentinel train`` still
writes the top-level ``models/``."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DATA_PACKAGE = "vllm_sentinel_data"


def shipped_dir(name: str) -> Path:
    """The directory of the data package ``vllm_sentinel_data.<name>`` (``rules`` or
    ``models``), resolved. The loaders read it with :class:`~pathlib.Path`, so the package
    must be installed as files (pip's default), not imported from a zip."""
    package = f"{DATA_PACKAGE}.{name}"
    try:
        root = files(package)
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"{package} is not installed: install vllm-sentinel (pip install "
            f"-e . in a checkout, or its wheel)"
        ) from exc
    if not isinstance(root, Path):
        raise RuntimeError(
            f"{package} is not a directory ({root!r}): install vllm-sentinel unzipped"
        )
    return root.resolve()
