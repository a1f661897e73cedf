"""``vllm-sentinel classify``: log files to one report per stream, for a person or as JSON.

Every envelope the service reads (raw text, Docker json-file, CRI, Fluent Bit / Fluentd
records, vLLM JSON logs, Kubernetes events and pod status), plain or gzip, or stdin; the
rules of ``--config``/``--rules-dir`` and the verified text model (unless ``--no-model``).
Exit 1 when a stream has an open critical incident, 2 when nothing could be read.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import zlib
from typing import TYPE_CHECKING, Any, BinaryIO

from service import ratelog
from service.ingest.compression import GZIP_MAGIC
from service.ingest.envelope import Format
from service.ingest.junk import EXECUTABLE, binary_input, executable

from .rules import load_rules
from .usage import add_command

if TYPE_CHECKING:  # the command loads the classifier when it runs
    from service.offline.report import StreamReport

__all__ = ["add_parser", "run"]

_COLOURS = {
    "compatibility": "\x1b[35m",
    "integration": "\x1b[33m",
    "capacity": "\x1b[31m",
    "other": "\x1b[36m",
    "none": "\x1b[32m",
}
_RESET = "\x1b[0m"
BINARY_BLOCK = 1 << 16  # bytes read at a time to tell a log from a binary file


def add_parser(sub: Any) -> None:
    """The ``classify`` command."""
    c = add_command(
        sub,
        "classify",
        "classify vLLM container logs",
        "Reads log files (plain, gzip) or stdin (-) in any envelope - raw text, Docker "
        "json-file,\nCRI, Fluent Bit / Fluentd records, vLLM JSON logs, Kubernetes "
        "events and pod status\n(kubectl get events -o json) - and prints one "
        "report per stream: status, stage reached,\nincidents with their root cause, "
        "first move and facts.",
    )
    c.add_argument("files", nargs="+", metavar="FILE", help="log files; - reads stdin")
    c.add_argument("--json", action="store_true", help="one JSON object per stream per line")
    c.add_argument(
        "--format",
        default="auto",
        choices=[f.value for f in Format],
        help="input envelope; auto detects it per line",
    )
    c.add_argument(
        "--no-model",
        action="store_true",
        help="signatures only (no text-model guess for unknown error lines)",
    )
    c.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour the tiers; auto: on a terminal unless NO_COLOR is set",
    )
    c.add_argument(
        "--now",
        nargs="?",
        const="now",
        metavar="TIME",
        help="a live capture (kubectl logs): check start-up stalls against this "
        "time (epoch or ISO 8601; bare --now: the current time) instead of the "
        "log's last timestamp",
    )
    c.add_argument(
        "--config",
        metavar="FILE",
        help="settings file whose rules section (extra rule directories, disabled "
        "and overridden rules) applies",
    )
    c.add_argument(
        "--rules-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="an extra directory of signature rules (repeatable; after --config's)",
    )
    c.set_defaults(run=run)


def _unreadable(path: str) -> str | None:
    """Why ``path`` cannot be classified (None: it can)."""
    if path == "-":  # stdin is read once: only its first bytes can be judged beforehand
        peek = getattr(sys.stdin.buffer, "peek", None)
        return EXECUTABLE if peek is not None and executable(peek(64)[:64]) else None
    if not os.path.exists(path):
        return "no such file"
    if os.path.isdir(path):
        return "is a directory (pass the log files in it)"
    if not os.access(path, os.R_OK):
        return "permission denied"
    if os.path.isfile(path) and os.path.getsize(path) == 0:  # (a pipe, <(...), has no size)
        return "is empty"
    if os.path.isfile(path):
        return _binary(path)
    return None


def _binary(path: str) -> str | None:
    """Why a file is nothing but binary (:func:`service.ingest.junk.binary_input`; gzip read
    through), or None: a log, junk lines and all (they are dropped and counted)."""
    with open(path, "rb") as raw:
        fh: BinaryIO = raw
        if raw.read(2) == GZIP_MAGIC:
            fh = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        raw.seek(0)
        try:
            return binary_input(iter(lambda: fh.read(BINARY_BLOCK), b""))
        except (OSError, EOFError, zlib.error):
            return None  # a broken gzip: the reader says so


def _physical_lines(path: str) -> int:
    """Non-empty lines of a file (gzip read through), for the format-override check."""
    from service.sources.files import read_file

    return sum(1 for _ in read_file(path, fmt="raw", join=False))


class Progress:
    """Bytes done and lines/s on one stderr line while a big input is classified (a TTY
    only; silent when piped)."""

    def __init__(self, total: int) -> None:
        self.total, self.done_bytes, self.started = total, 0, time.monotonic()
        self.shown = 0.0

    @classmethod
    def for_files(cls, paths: list[str]) -> Progress | None:
        total = sum(os.path.getsize(p) for p in paths if p != "-" and os.path.isfile(p))
        return cls(total) if total >= 64 << 20 else None

    def add(self, n: int) -> None:
        self.done_bytes += n
        now = time.monotonic()
        if now - self.shown >= 0.5:
            self.shown = now
            rate = self.done_bytes / max(now - self.started, 1e-6) / 1e6
            pct = 100 * self.done_bytes / self.total if self.total else 0
            print(
                f"\r  {pct:5.1f}%  {self.done_bytes / 1e6:,.0f} of {self.total / 1e6:,.0f} MB"
                f"  {rate:,.0f} MB/s",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def done(self) -> None:
        print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """``vllm-sentinel classify``: exit 1 on an open critical incident, 2 on bad input."""
    from service.classify.loader import build_classifier
    from service.offline.report import classify_paths

    for path in args.files:
        why = _unreadable(path)
        if why:
            print(f"vllm-sentinel classify: {path}: {why}", file=sys.stderr)
            return 2

    rules = load_rules(args.config, args.rules_dir)  # ConfigError: one line per problem
    clf = build_classifier(use_model=not args.no_model, rulebook=rules.rulebook())
    ratelog.redact_details_with(clf.rules.redactor.redact)  # rejected lines logged masked
    now = None
    if args.now is not None:
        from service.api.timespec import parse_instant

        try:
            now = time.time() if args.now == "now" else parse_instant(args.now)
        except ValueError as exc:
            print(f"vllm-sentinel classify: --now: {exc}", file=sys.stderr)
            return 2
    progress = Progress.for_files(args.files) if sys.stderr.isatty() else None
    reports = classify_paths(
        args.files, clf, fmt=args.format, now=now, on_block=progress.add if progress else None
    )
    if progress:
        progress.done()
    if args.format != "auto":
        for path in args.files:
            if path == "-":
                continue
            lines = _physical_lines(path)
            kept = (
                sum(
                    r["lines"]
                    for r in reports
                    if r["stream"] == path or r["meta"].get("path") == path
                )
                if len(args.files) > 1
                else sum(r["lines"] for r in reports)
            )
            if lines and kept < lines / 2:
                print(
                    f"vllm-sentinel classify: warning: --format {args.format} kept {kept} of "
                    f"{lines} lines of {path}; is it another envelope? (--format auto "
                    "detects it per line)",
                    file=sys.stderr,
                )
    if not reports or not any(r["lines"] for r in reports):
        print(
            "vllm-sentinel classify: no log lines could be read from "
            f"{', '.join(args.files)} (see --format, -v for the rejects)",
            file=sys.stderr,
        )
        return 2
    colour = args.color == "always" or (
        args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    )
    failed = False
    for rep in reports:
        failed = failed or any(
            i["severity"] == "critical" and i["status"] == "open" for i in rep["incidents"]
        )
        if args.json:
            print(json.dumps(rep, ensure_ascii=False, default=str))
        else:
            print(_human(rep, colour))
    return 1 if failed else 0


def _human(rep: StreamReport, colour: bool) -> str:
    def c(tier: str, text: str) -> str:
        return f"{_COLOURS.get(tier, '')}{text}{_RESET}" if colour else text

    out = [
        f"== {rep['stream']}: {rep['status']} (reached {rep['stage'] or 'nothing'}, "
        f"{rep['lines']} lines)"
    ]
    stopped = rep.get("stopped")
    if not rep["incidents"] and stopped:
        quiet = stopped.get("no_progress_s")
        limit = stopped.get("deadline_s")
        out.append(
            "   "
            + c(
                "other",
                f"ended mid-start-up (during {stopped['stage'] or 'start-up'}): not healthy",
            )
            + (f", no progress for {quiet / 60:.1f} min" if quiet is not None else "")
            + (
                f" (stall deadline {limit / 60:.0f} min; --now checks a live capture)"
                if limit
                else ""
            )
        )
    elif not rep["incidents"]:
        out.append("   " + c("none", "healthy: no incident"))
    for w in rep.get("warnings", []):
        out.append(
            f" ~ warning {w['category']} ({w['rule']}): {w.get('detail') or w['line'][:200]}"
        )
    for inc in rep["incidents"]:
        head = f"{inc['tier']}/{inc['category']} at {inc['stage']}"
        out.append(
            f" * {c(inc['tier'], head)}  [{inc['severity']}, {inc['status']}, "
            f"{inc['method']} {inc['rule'] or ''} {inc['confidence']:.2f}]"
        )
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
    keys = (
        "image",
        "vllm_version",
        "model",
        "driver_version",
        "driver_cuda",
        "image_cuda",
        "gpu_model",
        "tensor_parallel_size",
        "nccl_version",
        "node",
    )
    shown = ", ".join(f"{k}={facts[k]}" for k in keys if k in facts)
    if shown:
        out.append(f"   facts: {shown}")
    return "\n".join(out)
