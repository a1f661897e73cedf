"""``vllm-sentinel notify-test RECEIVER``: a clearly marked test alert through one
receiver's own builder and delivery (:mod:`service.notify.trial`), and its answer."""

from __future__ import annotations

import argparse
import difflib
import getpass
import socket
import sys
from typing import Any

from .usage import add_command

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    n = add_command(
        sub,
        "notify-test",
        "send a test notification to one receiver",
        "Renders a test alert (event 'test'; its line says it is a test and who sent it)\n"
        "with the receiver's own builder (Slack, webhook, PagerDuty, Alertmanager), posts it\n"
        "as the service does and prints the receiver's answer. Nothing is stored. Exit 0\n"
        "when the receiver took it (2xx), 1 when it refused it or could not be reached.",
    )
    n.add_argument("receiver", metavar="RECEIVER", help="the receiver's name in the settings")
    n.add_argument(
        "--config",
        metavar="FILE",
        help="YAML settings file naming the receivers (SENTINEL_* environment variables "
        "override it)",
    )
    n.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """``vllm-sentinel notify-test``: exit 0 delivered, 1 refused or unreachable, 2 no such
    receiver."""
    from service.configcheck import load_checked
    from service.notify.trial import send_trial

    settings = load_checked(args.config)  # ConfigError: one line per problem
    names = [r.name for r in settings.receivers]
    receiver = next((r for r in settings.receivers if r.name == args.receiver), None)
    if receiver is None:
        near = difflib.get_close_matches(args.receiver, names, n=1)
        known = ", ".join(names) if names else "none in these settings"
        hint = f"did you mean {near[0]}? " if near else ""
        print(
            f"vllm-sentinel notify-test: no receiver named {args.receiver!r} ({hint}"
            f"receivers: {known})",
            file=sys.stderr,
        )
        return 2
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container's user with no name
        user = "someone"
    by = f"{user}@{socket.gethostname()} (vllm-sentinel notify-test)"
    answer = send_trial(receiver, settings.notify, by)
    print(answer.line())
    return 0 if answer.ok else 1
