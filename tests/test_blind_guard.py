"""The blind set (tests/blind) and the corpus never feed training: the loader refuses their
folders and no training example cites a blind case's source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.training.examples import load_examples

ROOT = Path(__file__).resolve().parents[1]


def sources(folder: Path) -> set[str]:
    out = set()
    for p in folder.glob("*.json"):
        src = json.loads(p.read_text()).get("source") or ""
        if src.startswith("http"):
            out.add(src.rstrip("/"))
    return out


@pytest.mark.parametrize("folder", ["tests/blind/cases", "tests/corpus/cases", "tests/blind"])
def test_the_training_loader_refuses_held_out_folders(folder: str) -> None:
    with pytest.raises(ValueError, match="held-out"):
        load_examples(ROOT / folder)


def test_no_training_example_cites_a_blind_case() -> None:
    blind = sources(ROOT / "tests/blind/cases")
    assert len(blind) >= 100
    cited = set()
    for path in (ROOT / "training_data").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                for part in str(json.loads(line).get("source", "")).split(";"):
                    cited.add(part.strip().split(" ")[0].rstrip("/"))
    assert not blind & cited, sorted(blind & cited)[:5]
