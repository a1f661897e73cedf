"""The redactor against an oracle (#27): a well-kept secret scanner (Yelp's detect-secrets,
a test dependency only) reads realistic lines - the real vLLM captures of
tests/fixtures/real and the corpus - with a secret of every shape of tests/secret_shapes.py
planted in them. Whatever the scanner finds in a planted line that it did not find in the
line as captured, it must not find once the line is redacted; nor may any piece of the
planted secret remain. The lines as captured pass unchanged (but for the 8,192 cut), so
normalisation never shows in a line with nothing secret."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from detect_secrets import SecretsCollection
from detect_secrets.settings import default_settings

from service.classify.redaction import LINE_CAP, load_redactor
from service.classify.rules import RULES_DIR
from service.records import Meta
from tests.secret_shapes import SHAPES, Planted, leaked, plant

ROOT = Path(__file__).resolve().parent
REDACTOR = load_redactor(RULES_DIR)
PER_SHAPE = 4  # real lines each shape is planted in


def real_lines() -> list[str]:
    files = sorted((ROOT / "fixtures").glob("real*/*.log"))
    files += sorted((ROOT / "corpus" / "cases").rglob("*.log"))
    out = []
    for f in files:
        out += [x for x in f.read_text(errors="replace").splitlines() if x.strip()]
    return out


LINES = real_lines()


def scan(lines: list[str], tmp: Path) -> list[set[str]]:
    """The secret values detect-secrets finds in each line (read as a log and as YAML, whose
    keyword rules read ``key: value``); public IP addresses are not credentials."""
    found: list[set[str]] = [set() for _ in lines]
    for suffix in ("log", "yaml"):
        path = tmp / f"lines.{suffix}"
        path.write_text("\n".join(x.replace("\r", " ") for x in lines) + "\n", encoding="utf-8")
        coll = SecretsCollection()
        with default_settings():
            coll.scan_file(str(path))
        for name in coll.files:
            for s in coll[name]:
                if s.type != "Public IP (ipv4)" and s.secret_value:
                    found[s.line_number - 1].add(s.secret_value)
    return found


def planted_lines() -> list[tuple[str, str, Planted]]:
    """(line as captured, line with a secret, what was planted): every shape in PER_SHAPE
    real lines, deterministically."""
    rng = random.Random(2027)
    out = []
    for seed in range(PER_SHAPE):
        for p in plant(seed):
            base = rng.choice(LINES)[:2000]
            out.append((base, f"{base} {p.fragment}", p))
    return out


def test_the_real_lines_pass_unchanged_but_for_the_cut() -> None:
    changed = [x for x in LINES if REDACTOR.redact(x, counted=False) != x]
    # a line over the cut is cut; one frame of a real traceback passes `token=token`
    assert all(len(x) > LINE_CAP or "token=token" in x for x in changed), changed[:3]
    assert len(changed) <= 5 and len(LINES) > 10_000


def test_every_shape_is_masked_and_the_oracle_finds_nothing_it_found_before(
    tmp_path: Path,
) -> None:
    cases = planted_lines()
    assert len({p.shape for _, _, p in cases}) == len(SHAPES) >= 70
    redacted = [REDACTOR.redact(line, counted=False) for _, line, _ in cases]
    assert [leaked(r, [p]) for r, (_, _, p) in zip(redacted, cases, strict=True)] == [
        [] for _ in cases
    ]
    base = scan([b for b, _, _ in cases], tmp_path)
    before = scan([line for _, line, _ in cases], tmp_path)
    after = scan(redacted, tmp_path)
    new = [b - a for a, b in zip(base, before, strict=True)]
    assert sum(1 for n in new if n) >= len(cases) // 5  # the oracle does find them
    still = {
        cases[i][2].shape: sorted(n & after[i]) + [v for v in n if v in redacted[i]]
        for i, n in enumerate(new)
        if n & after[i] or any(v in redacted[i] for v in n)
    }
    assert still == {}


@pytest.mark.parametrize("make", [lambda r: "hf_" + "Ab1" * 12, lambda r: "sk-proj-" + "Zx9" * 16])
def test_a_secret_straddling_the_cut_is_masked_whole(make: object) -> None:
    secret = make(None)  # type: ignore[operator]
    for offset in (5, 10, 16, 25, len(secret) - 1):
        line = "x" * (LINE_CAP - 1 - offset) + " " + secret + " tail " + "y" * 3000
        out = REDACTOR.redact(line, counted=False)
        assert len(out) <= LINE_CAP and out.endswith("…")
        assert secret[:12] not in out and secret[:4] not in out and "<RED" in out


def test_labels_and_envelope_fields_are_masked_keys_and_values() -> None:
    p = plant(5)
    sk = next(x for x in p if x.shape == "openai_bare").secrets[0]
    meta: Meta = {
        "pod": "vllm-0",
        "tag": f"kube.var.log?token={sk}",
        "labels": {"app": "vllm", "api-token": "plain-label-secret-77", "note": f"key {sk}"},
    }
    REDACTOR.redact_meta(meta)
    assert meta["labels"]["app"] == "vllm" and meta["pod"] == "vllm-0"
    assert meta["labels"]["api-token"] == "<REDACTED>"
    text = repr(meta)
    assert sk not in text and "plain-label-secret-77" not in text
