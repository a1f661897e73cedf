"""``vllm-sentinel`` command line: classify, train, evaluate, serve, check-config, rules,
feedback-export."""

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
    "compatibility": "\x1b[35m",
    "integration": "\x1b[33m",
    "capacity": "\x1b[31m",
    "other": "\x1b[36m",
    "none": "\x1b[32m",
}
_RESET = "\x1b[0m"


_EPILOG = (
    "A settings file with problems is refused with one line per problem (vllm-sentinel\n"
    "check-config FILE lists them all). Exit codes: 0 ok; 1 a finding (classify: a\n"
    "critical incident; check-config, rules test: a problem); 2 bad usage, unreadable\n"
    "input or settings."
)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (line breaks kept); the default of each option shown."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "%(default)" not in text
            and action.default not in (None, False, argparse.SUPPRESS)
            and not isinstance(action.default, list)
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


def _command(sub: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}",
        formatter_class=_Formatter,
        epilog=_EPILOG,
    )


def _parser() -> argparse.ArgumentParser:
    from service import __version__

    p = argparse.ArgumentParser(
        prog="vllm-sentinel",
        formatter_class=_Formatter,
        epilog=_EPILOG,
        description="Classify vLLM container failures from their logs and page the right "
        "owner.\n\nvllm-sentinel COMMAND --help explains each command.",
    )
    p.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"vllm-sentinel {__version__}",
        help="print the version and exit",
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="log rejected input and warnings on stderr"
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    c = _command(
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

    t = _command(
        sub,
        "train",
        "rebuild the text model",
        "Trains the text model on training_data/ into models/ and pins it. Its own "
        "options:\nvllm-sentinel train --help.",
    )
    t.add_argument("args", nargs=argparse.REMAINDER, help="options of the trainer")

    e = _command(
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

    s = _command(
        sub,
        "serve",
        "run the streaming service",
        "Ingests over HTTP, the Fluent forward protocol and Kafka, keeps incidents in "
        "the store\nand notifies the receivers. Settings: --config FILE, then "
        "SENTINEL_* environment\nvariables (SENTINEL_API__TOKEN=...); see "
        "deploy/sentinel.example.yaml.",
    )
    s.add_argument(
        "--config",
        metavar="FILE",
        help="YAML settings file (SENTINEL_* environment variables override it)",
    )

    cc = _command(
        sub,
        "check-config",
        "check a settings file",
        "Prints one line per problem and exits 1 if there is any: unknown keys, "
        "wrong types,\nX_env / X_file that cannot be read, receiver matchers "
        "outside the taxonomy,\nreceivers without a routing key or URL, ports no "
        "client can reach, an open API or\nforward port beyond loopback, the store "
        "URL, extra rule directories and their\nexamples. SENTINEL_* environment "
        "variables apply as for serve.",
    )
    cc.add_argument("file", metavar="FILE", help="YAML settings file; - reads stdin")
    cc.add_argument(
        "--probe",
        action="store_true",
        help="also connect to every receiver and Kafka broker and bind the listen ports",
    )

    r = _command(
        sub,
        "rules",
        "list and test the signature rules",
        "vllm-sentinel rules list: the rules in effect.\nvllm-sentinel rules test "
        "DIR...: every rule's examples, with DIR's rules added.",
    )
    rsub = r.add_subparsers(dest="rules_cmd", required=True, metavar="ACTION")
    rl = rsub.add_parser(
        "list",
        help="the rules in effect, one a line",
        description="The rules in effect: id, tier/category, role, "
        "priority, and where each comes from\n(shipped, added or replaced "
        "by an extra directory, overridden by id).",
        formatter_class=_Formatter,
        epilog=_EPILOG,
    )
    rt = rsub.add_parser(
        "test",
        help="run every rule's examples",
        description="Loads the shipped rules plus DIR's (a DIR rule with a "
        "shipped id replaces it) and runs\nevery rule's examples: each "
        "examples.match line must match the rule, no\nexamples.no_match "
        "line may. One line per failure; exit 1 if any.",
        formatter_class=_Formatter,
        epilog=_EPILOG,
    )
    rt.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help="directories of *.yaml rule files (the schema of "
        "rules/signatures/*.yaml); none: the shipped rules only",
    )
    for x in (rl, rt):
        x.add_argument(
            "--config",
            metavar="FILE",
            help="settings file whose rules section (dirs, disabled, overrides) applies",
        )
    rl.add_argument(
        "--rules-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="an extra directory of signature rules (repeatable)",
    )
    rl.add_argument("--json", action="store_true", help="one JSON object per rule")

    f = _command(
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
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # train's own options (--data, --with-feedback, --help ...) go to the trainer as they are
    # (argparse.REMAINDER does not take arguments that start with "-" first)
    cmd_at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if cmd_at is not None and argv[cmd_at] == "train":
        args = _parser().parse_args([*argv[:cmd_at], "train"])
        args.args = argv[cmd_at + 1 :]
    else:
        args = _parser().parse_args(argv)
    from service.configcheck import ConfigError
    from service.netguard import InsecureConfigError

    try:
        return _run(args)
    except ConfigError as exc:  # one line per problem, never a traceback
        for problem in exc.problems:
            print(f"vllm-sentinel {args.cmd}: {problem}", file=sys.stderr)
        return 2
    except InsecureConfigError as exc:
        print(f"vllm-sentinel {args.cmd}: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "serve":  # a service logs at INFO (serve configures it; -v changes nothing)
        from service.app import serve

        return serve(args.config)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.cmd == "classify":
        return _classify(args)
    if args.cmd == "train":
        from service.classify.training import main as train_main

        return train_main(args.args, prog="vllm-sentinel train")
    if args.cmd == "evaluate":
        from service.evaluate import main as evaluate_main

        return evaluate_main(args.directory, args.mode, args.json)
    if args.cmd == "feedback-export":
        return _feedback_export(args)
    if args.cmd == "check-config":
        return _check_config(args)
    if args.cmd == "rules":
        return _rules(args)
    return 2


def _check_config(args: argparse.Namespace) -> int:
    from service.configcheck import check_config

    shown = "stdin" if args.file == "-" else args.file
    text = sys.stdin.read() if args.file == "-" else None
    problems = check_config(shown, probe=args.probe, text=text)
    for problem in problems:
        print(problem if problem.startswith(f"{shown}:") else f"{shown}: {problem}")
    if problems:
        print(
            f"{shown}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", file=sys.stderr
        )
        return 1
    print(f"{shown}: ok")
    return 0


def _rule_settings(
    config: str | None, dirs: list[str]
) -> tuple[list[str], list[str], dict[str, Any]]:
    """(extra dirs, disabled ids, overrides) of ``--config`` plus ``dirs``."""
    if not config:
        return list(dirs), [], {}
    from service.configcheck import load_checked

    rules = load_checked(config).rules
    return [*rules.dirs, *dirs], list(rules.disabled), dict(rules.overrides)


def load_rules(config: str | None, dirs: list[str]) -> Any:
    """The rule set in effect, or :class:`ConfigError` listing what is wrong."""
    from service.classify.ruletest import RuleLoadError, load_rule_set
    from service.configcheck import ConfigError

    extra, disabled, overrides = _rule_settings(config, dirs)
    try:
        return load_rule_set(extra, disabled, overrides)
    except RuleLoadError as exc:
        raise ConfigError([f"rules: {p}" for p in exc.problems]) from None


def _rules(args: argparse.Namespace) -> int:
    from service.classify.ruletest import count_examples, run_examples

    if args.rules_cmd == "list":
        rs = load_rules(args.config, args.rules_dir)
        for sig in sorted(rs.signatures, key=lambda s: s.id):
            row = {
                "id": sig.id,
                "tier": sig.tier,
                "category": sig.category,
                "role": sig.role,
                "priority": sig.priority,
                "status": rs.status.get(sig.id),
                "source": rs.source.get(sig.id),
            }
            if args.json:
                print(json.dumps(row))
            else:
                print(
                    f"{sig.id:44s} {sig.tier}/{sig.category:20s} {sig.role:8s} "
                    f"{sig.priority:4d}  {row['status']}: {row['source']}"
                )
        if not args.json:
            print(
                f"{len(rs.signatures)} rules"
                + (f"; disabled: {', '.join(rs.disabled)}" if rs.disabled else ""),
                file=sys.stderr,
            )
        return 0
    rs = load_rules(args.config, args.dirs)
    failures = run_examples(rs)
    for line in failures:
        print(line)
    n_examples = count_examples(rs)
    if failures:
        print(f"{len(failures)} of {n_examples} examples fail", file=sys.stderr)
        return 1
    added = sum(1 for s in rs.signatures if rs.status.get(s.id) != "shipped")
    print(
        f"{len(rs.signatures)} rules ({added} from {', '.join(args.dirs) or 'no extra dir'}"
        f"), {n_examples} examples: all pass"
    )
    return 0


def _feedback_export(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url

    from service.configcheck import load_checked
    from service.feedback import corrections, write_jsonl
    from service.store import Store
    from service.store.engine import normalise_url

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
    if os.path.isfile(path) and os.path.getsize(path) == 0:  # (a pipe, <(...), has no size)
        return "is empty"
    return None


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


def _classify(args: argparse.Namespace) -> int:
    from service.classify.loader import build_classifier
    from service.classify.report import classify_paths

    for path in args.files:
        why = _unreadable(path)
        if why:
            print(f"vllm-sentinel classify: {path}: {why}", file=sys.stderr)
            return 2
    from service.classify.rulebook import RuleBook

    rules = load_rules(args.config, args.rules_dir)  # ConfigError: one line per problem
    clf = build_classifier(
        use_model=not args.no_model, rulebook=RuleBook(signatures=rules.signatures)
    )
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


def _human(rep: dict[str, Any], colour: bool) -> str:
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
            + c("other", f"not healthy yet: the log ends during {stopped['stage'] or 'start-up'}")
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


if __name__ == "__main__":
    sys.exit(main())
