"""The image is reproducible (issue #28): every ``FROM`` names an exact Python release (a
floating ``3.11-slim`` moves under you), and the dependencies install at the exact versions
of ``deploy/constraints.txt``, which pins every runtime dependency of the package and theirs
(checked against the installed package's own requirements)."""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"


def pinned() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def test_every_base_image_is_an_exact_release() -> None:
    images = re.findall(r"^FROM\s+(\S+)", DOCKERFILE, flags=re.M)
    assert images
    for image in images:
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image), (
            image
        )


def test_the_dependencies_install_under_the_constraints() -> None:
    assert "COPY deploy/constraints.txt" in DOCKERFILE
    installs = re.findall(r"pip install [^\n]*", DOCKERFILE)
    assert installs and all("-c /tmp/constraints.txt" in i for i in installs), installs
    assert "!deploy/constraints.txt" in (ROOT / ".dockerignore").read_text()


def test_the_constraints_pin_every_runtime_dependency() -> None:
    pins = pinned()
    env = default_environment()
    missing = []
    for raw in md.distribution("vllm-sentinel").requires or []:
        req = Requirement(raw)
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue  # an extra's (dev, train), or another platform's
        name = req.name.lower().replace("_", "-")
        if name not in pins:
            missing.append(name)
        else:
            assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    assert not missing, f"not pinned in deploy/constraints.txt: {missing}"
