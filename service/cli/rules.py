"""``vllm-sentinel rules list`` and ``rules test``: the signature rules in effect, and
every rule's examples run against it.

The rules in effect are the shipped ones plus extra directories (``--config``'s rules
section, then ``--rules-dir``/``DIR``), minus disabled ids, with overrides applied;
:func:`load_rules` builds them (``classify`` too) or raises ``ConfigError`` listing
what is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .usage import add_command

__all__ = ["add_parser", "load_rules", "run"]


def add_parser(sub: Any) -> None:
    """The ``rules`` command and its ``list`` and ``test`` actions."""
    r = add_command(
        sub,
        "rules",
        "list and test the signature rules",
        "vllm-sentinel rules list: the rules in effect.\nvllm-sentinel rules test "
        "DIR...: every rule's examples, with DIR's rules added.",
    )
    rsub = r.add_subparsers(dest="rules_cmd", required=True, metavar="ACTION")
    rl = add_command(
        rsub,
        "list",
        "the rules in effect, one a line",
        "The rules in effect: id, tier/category, role, priority, and where each comes from\n"
        "(shipped, added or replaced by an extra directory, overridden by id).",
        full=False,
    )
    rt = add_command(
        rsub,
        "test",
        "run every rule's examples",
        "Loads the shipped rules plus DIR's (a DIR rule with a shipped id replaces it) and "
        "runs\nevery rule's examples: each examples.match line must match the rule, no\n"
        "examples.no_match line may. One line per failure; exit 1 if any.",
        full=False,
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
    r.set_defaults(run=run)


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


def run(args: argparse.Namespace) -> int:
    """``vllm-sentinel rules list`` / ``rules test``: exit 1 when an example fails."""
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
    redactor = rs.rulebook().redactor  # its examples ran when it loaded
    n_red = sum(len(p.examples.match) + len(p.examples.no_match) for p in redactor.patterns)
    print(f"{len(redactor.patterns)} redaction patterns, {n_red} examples: all pass")
    return 0
