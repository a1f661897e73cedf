"""``vllm-sentinel serve`` (the streaming service) and ``check-config`` (its settings
file checked, one line per problem)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .usage import add_command

__all__ = ["add_check_config", "add_serve", "check_config", "serve"]


def add_serve(sub: Any) -> None:
    s = add_command(
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
    s.set_defaults(run=serve)


def add_check_config(sub: Any) -> None:
    cc = add_command(
        sub,
        "check-config",
        "check a settings file",
        "Prints one line per problem, all in one pass, and exits 1 if there is any: "
        "unknown keys\n(with the nearest known one), "
        "wrong types,\nX_env / X_file that cannot be read, receiver matchers "
        "outside the taxonomy,\nstage names that are not stages (stall.deadlines_s), receivers without a routing key or URL, ports no "
        "client can reach, an open API or\nforward port beyond loopback, the store "
        "URL, extra rule directories and their\nexamples. Warnings (exit 0): alert "
        "links nobody can open (notify.external_url). Notes: a listen port in use\nby "
        "a running vllm-sentinel (--probe; the settings of a service that is up).\n"
        "SENTINEL_* environment variables apply as for serve.",
    )
    cc.add_argument("file", metavar="FILE", help="YAML settings file; - reads stdin")
    cc.add_argument(
        "--probe",
        action="store_true",
        help="also connect to every receiver and Kafka broker and bind the listen ports",
    )
    cc.set_defaults(run=check_config)


def serve(args: argparse.Namespace) -> int:
    """``vllm-sentinel serve``: runs until stopped (it configures its own logging)."""
    from service.app import serve as run_service

    return run_service(args.config)


def check_config(args: argparse.Namespace) -> int:
    """``vllm-sentinel check-config``: one line per problem, exit 1 if there is any."""
    from service.configcheck import check_report

    shown = "stdin" if args.file == "-" else args.file
    text = sys.stdin.read() if args.file == "-" else None
    report = check_report(shown, probe=args.probe, text=text)
    problems, warnings = report.problems, report.warnings
    for problem in problems:
        print(problem if problem.startswith(f"{shown}:") else f"{shown}: {problem}")
    for warning in warnings:
        print(f"{shown}: warning: {warning}")
    for note in report.notes:
        print(f"{shown}: note: {note}")
    if problems:
        print(
            f"{shown}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", file=sys.stderr
        )
        return 1
    print(
        f"{shown}: ok"
        + (f" ({len(warnings)} warning{'s' * (len(warnings) != 1)})" if warnings else "")
    )
    return 0
