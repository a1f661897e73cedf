"""The two halves of the second blind set (``tests/blind2``): a dev half and a held-out half.

The rule is fixed and mechanical, chosen before any case was scored: a case belongs to the
dev half when the SHA-256 of its id (the file name without ``.log`` / ``.json``, UTF-8) is
an even number, to the held-out half when it is odd. Nothing about a case's label, program
or content enters the rule, and the rule never changes; a case added later falls where its
hash puts it.

Use the dev half to look at failures case by case; report the held-out half only as a
number (its per-case results are not for reading while tuning).

    python -m tests.blind2.split dev DIR      # copy the dev half's .log/.json into DIR
    python -m tests.blind2.split heldout DIR  # same for the held-out half
    python -m tests.blind2.split list         # print "<half> <case id>" for every case
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Literal

Half = Literal["dev", "heldout"]
HALVES: tuple[Half, Half] = ("dev", "heldout")
CASES = Path(__file__).resolve().parent / "cases"


def half(case_id: str) -> Half:
    """The half ``case_id`` belongs to: ``dev`` when sha256(id) is even, else ``heldout``."""
    digest = int(hashlib.sha256(case_id.encode("utf-8")).hexdigest(), 16)
    return "dev" if digest % 2 == 0 else "heldout"


def case_ids(which: Half | None = None, cases: Path = CASES) -> list[str]:
    """Sorted ids of the cases in ``cases`` (all of them, or one half)."""
    ids = sorted(p.stem for p in cases.glob("*.json"))
    return [i for i in ids if which is None or half(i) == which]


def materialise(which: Half, dest: Path, cases: Path = CASES) -> list[str]:
    """Copy one half's ``.log``/``.json`` pairs into ``dest`` (created); returns the ids."""
    dest.mkdir(parents=True, exist_ok=True)
    ids = case_ids(which, cases)
    for cid in ids:
        for ext in (".log", ".json"):
            shutil.copy2(cases / f"{cid}{ext}", dest / f"{cid}{ext}")
    return ids


def main(argv: list[str], cases: Path = CASES, usage: str | None = __doc__) -> int:
    """The command line of a set's split (``list``, ``dev DIR``, ``heldout DIR``)."""
    if argv[:1] == ["list"]:
        for cid in case_ids(None, cases):
            print(half(cid), cid)
        return 0
    if len(argv) == 2 and argv[0] in HALVES:
        which: Half = "dev" if argv[0] == "dev" else "heldout"
        ids = materialise(which, Path(argv[1]), cases)
        print(f"{len(ids)} {which} cases -> {argv[1]}")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
