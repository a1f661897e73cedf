"""The two halves of the third blind set (``tests/blind3``): a dev half and a held-out half.

The same fixed rule as ``tests/blind2/split.py`` (whose functions this module reuses): a
case belongs to the dev half when the SHA-256 of its id (UTF-8) is even, to the held-out
half when it is odd. Nothing about a case's label, program or content enters it.

    python -m tests.blind3.split dev DIR      # copy the dev half's .log/.json into DIR
    python -m tests.blind3.split heldout DIR  # same for the held-out half
    python -m tests.blind3.split list         # print "<half> <case id>" for every case
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.blind2 import split as rule
from tests.blind2.split import HALVES, Half, half

CASES = Path(__file__).resolve().parent / "cases"

__all__ = ["CASES", "HALVES", "Half", "case_ids", "half", "main", "materialise"]


def case_ids(which: Half | None = None) -> list[str]:
    """Sorted ids of this set's cases (all of them, or one half)."""
    return rule.case_ids(which, CASES)


def materialise(which: Half, dest: Path) -> list[str]:
    """Copy one half's ``.log``/``.json`` pairs into ``dest`` (created); returns the ids."""
    return rule.materialise(which, dest, CASES)


def main(argv: list[str]) -> int:
    return rule.main(argv, CASES, __doc__)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
