"""The text model's lifecycle: ``vllm-sentinel train``, ``evaluate`` and ``feedback-export``.

The one door to :mod:`service.training`: each command imports just the module it runs,
when it runs (``classify`` and ``serve`` never load it). ``train`` needs scikit-learn (the
``[train]`` extra): without it, it says what to install in one line and exits 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from .usage import add_command

__all__ = [
    "add_evaluate",
    "add_feedback_export",
    "add_train",
    "evaluate",
    "feedback_export",
    "train",
]

NEEDS_EXTRA = (
    "training needs scikit-learn, which is not installed: pip install 'vllm-sentinel[train]'"
)


def add_train(sub: Any) -> None:
    t = add_command(
        sub,
        "train",
        "rebuild the text model",
        "Trains the text model on --data into --out: the verified artifact, its manifest "
        "and\nmodel card; writing the shipped models/ also pins its digests in the "
        "package.\nNeeds the [train] extra (scikit-learn). Same data and seed, same "
        "artifact bytes.",
    )
    t.add_argument(
        "--data", type=Path, default=Path("training_data"), help="directory of *.jsonl examples"
    )
    t.add_argument(
        "--out",
        type=Path,
        default=Path("models"),
        help="output directory for the artifact, manifest, model card",
    )
    t.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    t.add_argument(
        "--with-feedback",
        dest="feedback",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSONL of corrections {text, category} to add (vllm-sentinel feedback-export)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress on stderr")
    t.set_defaults(run=train)


def add_evaluate(sub: Any) -> None:
    e = add_command(
        sub,
        "evaluate",
        "score the classifier on a labelled corpus",
        "Reads DIRECTORY/*.log with their *.json labels (tier, category, stage) and "
        "prints\naccuracy per mode.",
    )
    e.add_argument("directory", metavar="DIRECTORY", help="corpus directory (*.log + *.json)")
    e.add_argument(
        "--mode",
        choices=["hybrid", "signatures", "model", "all", "ablation"],
        default="all",
        help="what decides; ablation removes each case's deciding rule (unseen wording)",
    )
    e.add_argument("--json", action="store_true", help="the scores as one JSON object")
    e.set_defaults(run=evaluate)


def add_feedback_export(sub: Any) -> None:
    f = add_command(
        sub,
        "feedback-export",
        "export the store's feedback as corrections",
        "Writes {text, category} lines for vllm-sentinel train --with-feedback.",
    )
    f.add_argument(
        "--config", metavar="FILE", help="YAML settings file of the service (its store.url is read)"
    )
    f.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="JSONL file to write ({text, category} a line); - for stdout",
    )
    f.set_defaults(run=feedback_export)


def train(args: argparse.Namespace) -> int:
    """``vllm-sentinel train``: one JSON line of scores on stdout; exit 2 on bad data or
    without scikit-learn."""
    if importlib.util.find_spec("sklearn") is None:
        print(f"vllm-sentinel train: {NEEDS_EXTRA}", file=sys.stderr)
        return 2
    from service.training.fit import train as fit

    try:
        manifest = fit(
            args.data, args.out, seed=args.seed, feedback=args.feedback, quiet=args.quiet
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"training failed: {exc}", file=sys.stderr)
        return 2
    s = manifest["scores"]
    summary = {
        "macro_f1": s["macro_f1"],
        "threshold": manifest["threshold"],
        "abstain_rate": s["abstain_rate"],
        "healthy_false_alarms": s["healthy_false_alarms"],
        "sha256": manifest["sha256"],
    }
    print(json.dumps(summary))
    return 0


def evaluate(args: argparse.Namespace) -> int:
    """``vllm-sentinel evaluate``: scores per mode (or the ablation), as text or JSON."""
    from service.training.evaluate import MODES, ablation
    from service.training.evaluate import evaluate as score_mode

    directory = Path(args.directory)
    if args.mode == "ablation":
        r = ablation(directory)
        print(
            json.dumps(r, indent=2)
            if args.json
            else f"== ablation (deciding signature removed): {r['cases']} cases, "
            f"{r['rules_removed']} rules  category accuracy: signatures "
            f"{r['signatures_category_accuracy']:.3f} vs hybrid {r['hybrid_category_accuracy']:.3f}"
            f"  tier accuracy: signatures {r['signatures_tier_accuracy']:.3f} vs hybrid "
            f"{r['hybrid_tier_accuracy']:.3f}"
        )
        return 0
    modes = MODES if args.mode == "all" else (args.mode,)
    results = {m: score_mode(directory, m) for m in modes}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for m, r in results.items():
        print(
            f"== {m}: {r['cases']} cases  tier accuracy {r['tier_accuracy']:.3f}  "
            f"category macro-F1 {r['category_macro_f1']:.3f}  "
            f"stage accuracy {r['stage_accuracy']:.3f}  missed {len(r['missed_failures'])}  "
            f"false alarms {len(r['false_alarms'])}"
        )
        if m == modes[-1] or len(modes) == 1:
            for w in r["wrong"]:
                print(f"   {w['case']}: expected {w['expected']} got {w['got']}\n      {w['line']}")
    sys.stdout.flush()
    return 0


def feedback_export(args: argparse.Namespace) -> int:
    """``vllm-sentinel feedback-export``: exit 2 when the store cannot be read."""
    from sqlalchemy.engine import make_url

    from service.configcheck import load_checked
    from service.store import Store
    from service.store.engine import normalise_url
    from service.training.feedback import corrections, write_jsonl

    settings = load_checked(args.config)
    url = make_url(normalise_url(settings.store.url))
    if (
        url.get_backend_name() == "sqlite"
        and url.database not in (None, "", ":memory:")
        and not os.path.exists(url.database)
    ):  # (opening it would create an empty one)
        print(f"feedback-export: no database at {url.database}", file=sys.stderr)
        return 2
    store = Store(settings.store.url, pool_size=1)
    try:
        rows, skipped = corrections(store.list_feedback())
    except Exception as exc:  # noqa: BLE001 - a missing/unmigrated database, bad URL ...
        print(f"feedback-export: cannot read feedback from the store: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    if args.out == "-":
        write_jsonl(rows, sys.stdout)
    else:
        with open(args.out, "w", encoding="utf-8") as fh:
            write_jsonl(rows, fh)
    left_out = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in skipped.items() if n)
    print(
        f"feedback-export: {len(rows)} corrections written to {args.out}"
        + (f" (left out: {left_out})" if left_out else ""),
        file=sys.stderr,
    )
    return 0
