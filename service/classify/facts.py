"""Facts per stream (vLLM version, driver, CUDA, GPU, arguments) and the compatibility
explanation an engineer asks for first."""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from service.classify.rules import RULES_DIR


def cuda_from_api_version(value: str) -> str:
    """torch's "found version 12080" is the CUDA driver-API version: 12080 → ``12.8``."""
    n = int(value)
    return f"{n // 1000}.{(n % 1000) // 10}"


def norm_cuda(value: str) -> str:
    if value.isdigit() and len(value) == 3:  # "130" from "+cu130"
        return f"{value[:-1]}.{value[-1]}"
    parts = value.split(".")
    return ".".join(parts[:2])


class CudaTable:
    """``rules/cuda.yaml``: CUDA → minimum driver, driver branch → CUDA, image tag hints."""

    def __init__(self, rules_dir: Path = RULES_DIR) -> None:
        self._path = rules_dir / "cuda.yaml"

    @cached_property
    def data(self) -> dict[str, Any]:
        with self._path.open(encoding="utf-8") as fh:
            data: dict[str, Any] = yaml.safe_load(fh)
        return data

    def image_cuda(self, image: str) -> str | None:
        for hint in self.data["image_tags"]:
            m = re.search(hint["pattern"], image)
            if m:
                cuda: str = hint["cuda"].format(*m.groups())
                return cuda
        m = re.search(r"vllm-openai:v?0\.(\d+)\.\d+", image)
        if m and int(m.group(1)) >= 20:
            return "13.0"
        return None

    def driver_branch(self, driver_version: str) -> int | None:
        m = re.match(r"(\d{3})\.", driver_version)
        return int(m.group(1)) if m else None

    def cuda_of_branch(self, branch: int) -> str | None:
        table = {int(k): v for k, v in self.data["driver_branch_cuda"].items()}
        below = [b for b in table if b <= branch]
        return table[max(below)] if below else None

    def min_driver(self, cuda: str) -> tuple[str, int] | None:
        key = norm_cuda(cuda)
        entry = self.data["min_driver"].get(key)
        if entry:
            return entry["ga"], int(entry["branch"])
        major = key.split(".")[0]
        mc = self.data["minor_compat"].get(major)
        return (f"{mc['branch']}.xx", int(mc["branch"])) if mc else None


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def explain_compatibility(facts: dict[str, str], cuda: CudaTable) -> str | None:
    """E.g. "image needs CUDA 13.0 (driver ≥ 580.65.06, r580+); host driver supports CUDA
    12.9 (r575)" — or None when the facts do not say enough."""
    image_cuda = facts.get("image_cuda")
    host_cuda = facts.get("driver_cuda")
    driver = facts.get("driver_version")
    branch = cuda.driver_branch(driver) if driver else None
    if host_cuda is None and branch is not None:
        host_cuda = cuda.cuda_of_branch(branch)
    if image_cuda is None and host_cuda is None:
        return None
    parts: list[str] = []
    if image_cuda:
        need = cuda.min_driver(image_cuda)
        if need:
            parts.append(f"image needs CUDA {image_cuda} (driver ≥ {need[0]}, r{need[1]}+)")
        else:
            parts.append(f"image needs CUDA {image_cuda}")
    if host_cuda:
        if branch is None:
            rev = {v: k for k, v in cuda.data["driver_branch_cuda"].items()}
            branch = rev.get(norm_cuda(host_cuda))
        host = f"host driver supports CUDA {host_cuda}"
        if driver:
            host += f" (driver {driver}, r{branch})" if branch else f" (driver {driver})"
        elif branch:
            host += f" (r{branch})"
        parts.append(host)
    text = "; ".join(parts)
    if image_cuda and host_cuda and _ver(image_cuda) > _ver(host_cuda):
        text += " → the driver is too old for this image"
    return text
