#!/usr/bin/env python3
"""What redaction costs per line (not a test): the shipped redactor
(service/classify/redaction.py, rules/redaction.yaml) over

* **real**: every line of the real captures (tests/fixtures/real*, the corpus), as they are;
* **planted**: real lines with a secret of every shape of tests/secret_shapes.py appended;
* **worst**: crafted 8 KiB lines, one per pattern literal (and per layer: escapes, percent
  signs, non-ASCII), the literal repeated with what makes its pattern try hardest.

Prints the mean µs per line of the first two and the slowest crafted line in ms. Runs
unchanged on an older checkout (only ``load_redactor`` and ``redact`` are used), for before
and after figures: ``cd OLD && .venv/bin/python NEW/scripts/bench_redaction.py``.

Usage::

    .venv/bin/python scripts/bench_redaction.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROOT = Path.cwd()  # the checkout whose redactor is measured
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))

from service.classify.redaction import load_redactor  # noqa: E402
from service.classify.rules import RULES_DIR  # noqa: E402

CAP = 8192
CRAFT = [
    "token=",
    "token: ",
    "api_key': '",
    "--api-key ",
    "authorization: ",
    "bearer ",
    "cookie: ",
    "://a:",
    "://a:b@",
    "hf_",
    "sk-",
    "sk-Ab1",
    "AKIA",
    "ghp_",
    "xoxb-",
    "eyJ",
    "eyJabcdefgh.eyJ",
    '"name":"HF_TOKEN","value":',
    "-----BEGIN PRIVATE KEY-----",
    "hooks.slack.com/services/",
    "?key=",
    '\\"',
    "%3D",
    "%25",
    "＝",
    "\u200b",
    "é",
]


def real_lines() -> list[str]:
    files = sorted((HERE / "tests" / "fixtures").glob("real*/*.log"))
    files += sorted((HERE / "tests" / "corpus" / "cases").rglob("*.log"))
    return [x for f in files for x in f.read_text(errors="replace").splitlines()]


def per_line(redact: object, lines: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for line in lines:
            redact(line, counted=False)  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best / len(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    redactor = load_redactor(RULES_DIR)
    real = real_lines()
    spec = importlib.util.spec_from_file_location(
        "secret_shapes", HERE / "tests" / "secret_shapes.py"
    )
    assert spec is not None and spec.loader is not None
    shapes = importlib.util.module_from_spec(spec)
    sys.modules["secret_shapes"] = shapes
    spec.loader.exec_module(shapes)
    plant = shapes.plant
    planted = [f"{real[(i * 7919) % len(real)][:400]} {p.fragment}" for i, p in enumerate(plant(1))]
    planted *= 20
    print(f"redactor of {ROOT}")
    print(
        f"real lines: {len(real)}, {per_line(redactor.redact, real, args.repeat) * 1e6:.1f} µs/line"
    )
    print(
        f"planted lines: {len(planted)}, "
        f"{per_line(redactor.redact, planted, args.repeat) * 1e6:.1f} µs/line"
    )
    worst = []
    for lit in CRAFT:
        line = (lit + "Zq7xWv3K ") * (CAP // (len(lit) + 9) + 1)
        worst.append((per_line(redactor.redact, [line[:CAP]], args.repeat) * 1e3, lit))
    worst.sort(reverse=True)
    for ms, lit in worst[:5]:
        print(f"crafted 8 KiB line of {lit!r}: {ms:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
