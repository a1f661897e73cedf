"""``vllm-sentinel`` command line: classify, train, evaluate, serve, feedback-export."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from service.ingest.envelope import Format

_COLOURS = {
    "compatibility": "\x1b[35m", "integration": "\x1b[33m", "capacity": "\x1b[31m",
    "other": "\x1b[36m", "none": "\x1b[32m",
}
_RESET = "\x1b[0m"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm-sentinel", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log rejects and warnings")
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("classify", help="classify vLLM container logs (files or - for stdin)")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--json", action="store_true", help="one JSON object per stream per line")
    c.add_argument("--format", default="auto", choices=[f.value for f in Format],
                   help="input envelope (default: detect per line)")
    c.add_argument("--no-model", action="store_true", help="signatures only")
    c.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    c.add_argument("--now", nargs="?", const="now", metavar="TIME",
                   help="a live capture (kubectl logs): check start-up stalls against this "
                   "time (epoch or ISO 8601; bare --now: the current time) instead of the "
                   "log's last timestamp")

    t = sub.add_parser("train", help="rebuild the text model from training_data/ into models/")
    t.add_argument("args", nargs=argparse.REMAINDER)

    e = sub.add_parser("evaluate", help="score the classifier on a labelled corpus directory")
    e.add_argument("directory")
    e.add_argument("--mode", choices=["hybrid", "signatures", "model", "all", "ablation"],
                   default="all", help="ablation: remove each case's deciding rule (unseen wording)")
    e.add_argument("--json", action="store_true")

    s = sub.add_parser("serve", help="run the streaming service")
    s.add_argument("--config", help="YAML settings file (env SENTINEL_* overrides)")

    f = sub.add_parser("feedback-export",
                       help="write the store's feedback as corrections for train --with-feedback")
    f.add_argument("--config", help="YAML settings file of the service (its store.url is read)")
    f.add_argument("--out", required=True, help="JSONL file to write ({text, category} a line), "
                   "- for stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # train's own options (--data, --with-feedback, --help ...) go to the trainer as they are
    # (argparse.REMAINDER does not take arguments that start with "-" first)
    cmd_at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if cmd_at is not None and argv[cmd_at] == "train":
        args = _parser().parse_args([*argv[:cmd_at], "train"])
        args.args = argv[cmd_at + 1:]
    else:
        args = _parser().parse_args(argv)
    if args.cmd == "serve":  # a service logs at INFO (serve configures it; -v changes nothing)
        from service.app import serve

        return serve(args.config)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.cmd == "classify":
        return _classify(args)
    if args.cmd == "train":
        from service.classify.training import main as train_main

        return train_main(args.args)
    if args.cmd == "evaluate":
        from service.evaluate import main as evaluate_main

        return evaluate_main(args.directory, args.mode, args.json)
    if args.cmd == "feedback-export":
        return _feedback_export(args)
    return 2


def _feedback_export(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url

    from service.config import load_settings
    from service.feedback import corrections, write_jsonl
    from service.store import Store
    from service.store.engine import normalise_url

    settings = load_settings(args.config)
    url = make_url(normalise_url(settings.store.url))
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:") \
            and not os.path.exists(url.database):  # (opening it would create an empty one)
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
    print(f"feedback-export: {len(rows)} corrections written to {args.out}"
          + (f" (left out: {left_out})" if left_out else ""), file=sys.stderr)
    return 0


def _unreadable(path: str) -> str | None:
    """Why ``path`` cannot be classified (None: it can)."""
    if path == "-":
        return None
    if not os.path.exists(path):
        return "no such file"
    if os.path.isdir(path):
        return "is a directory (pass the log files in it)"
    if not os.access(path, os.R_OK):
        return "permission denied"
    if os.path.getsize(path) == 0:
        return "is empty"
    return None


def _physical_lines(path: str) -> int:
    """Non-empty lines of a file (gzip read through), for the format-override check."""
    from service.ingest.files import read_file

    return sum(1 for _ in read_file(path, fmt="raw", join=False))


def _classify(args: argparse.Namespace) -> int:
    from service.classify.loader import build_classifier
    from service.classify.report import classify_records
    from service.ingest.files import read_files

    for path in args.files:
        why = _unreadable(path)
        if why:
            print(f"vllm-sentinel classify: {path}: {why}", file=sys.stderr)
            return 2
    clf = build_classifier(use_model=not args.no_model)
    per_path: dict[str, int] = {}
    records = []
    for path in args.files:
        got = list(read_files([path], fmt=args.format))
        per_path[path] = len(got)
        records.extend(got)
    if args.format != "auto":
        for path, kept in per_path.items():
            if path == "-":
                continue
            lines = _physical_lines(path)
            if lines and kept < lines / 2:
                print(f"vllm-sentinel classify: warning: --format {args.format} kept {kept} of "
                      f"{lines} lines of {path}; is it another envelope? (--format auto "
                      "detects it per line)", file=sys.stderr)
    if not records:
        print("vllm-sentinel classify: no log lines could be read from "
              f"{', '.join(args.files)} (see --format, -v for the rejects)", file=sys.stderr)
        return 2
    now = None
    if args.now is not None:
        from service.api.timespec import parse_instant

        try:
            now = time.time() if args.now == "now" else parse_instant(args.now)
        except ValueError as exc:
            print(f"vllm-sentinel classify: --now: {exc}", file=sys.stderr)
            return 2
    reports = classify_records(records, clf, now=now)
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                        and not os.environ.get("NO_COLOR"))
    failed = False
    for rep in reports:
        failed = failed or any(i["severity"] == "critical" and i["status"] == "open"
                               for i in rep["incidents"])
        if args.json:
            print(json.dumps(rep, ensure_ascii=False, default=str))
        else:
            print(_human(rep, colour))
    return 1 if failed else 0


def _human(rep: dict[str, Any], colour: bool) -> str:
    def c(tier: str, text: str) -> str:
        return f"{_COLOURS.get(tier, '')}{text}{_RESET}" if colour else text

    out = [f"== {rep['stream']}: {rep['status']} (reached {rep['stage'] or 'nothing'}, "
           f"{rep['lines']} lines)"]
    stopped = rep.get("stopped")
    if not rep["incidents"] and stopped:
        quiet = stopped.get("no_progress_s")
        limit = stopped.get("deadline_s")
        out.append("   " + c("other", f"not healthy yet: the log ends during "
                              f"{stopped['stage'] or 'start-up'}")
                   + (f", no progress for {quiet / 60:.1f} min" if quiet is not None else "")
                   + (f" (stall deadline {limit / 60:.0f} min; --now checks a live capture)"
                      if limit else ""))
    elif not rep["incidents"]:
        out.append("   " + c("none", "healthy: no incident"))
    for w in rep.get("warnings", []):
        out.append(f" ~ warning {w['category']} ({w['rule']}): {w.get('detail') or w['line'][:200]}")
    for inc in rep["incidents"]:
        head = f"{inc['tier']}/{inc['category']} at {inc['stage']}"
        out.append(f" * {c(inc['tier'], head)}  [{inc['severity']}, {inc['status']}, "
                   f"{inc['method']} {inc['rule'] or ''} {inc['confidence']:.2f}]")
        out.append(f"   root cause: {inc['line'][:4000]}")  # whole: the first move needs it
        if inc.get("explanation"):
            out.append(f"   why: {inc['explanation']}")
        if inc.get("restarts"):
            out.append(f"   failed the same way on {inc['restarts']} restart(s)")
        if inc["remediation"]:
            out.append(f"   first move: {inc['remediation']}")
        for r in inc["related"][:5]:
            out.append(f"   related ({r['role']}): {r['category']}: {r['line'][:160]}")
    facts = rep["facts"]
    keys = ("image", "vllm_version", "model", "driver_version", "driver_cuda", "image_cuda",
            "gpu_model", "tensor_parallel_size", "nccl_version", "node")
    shown = ", ".join(f"{k}={facts[k]}" for k in keys if k in facts)
    if shown:
        out.append(f"   facts: {shown}")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
