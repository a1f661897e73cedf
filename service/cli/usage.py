"""The help every ``vllm-sentinel`` command shares: descriptions as written, each option's
default shown, and the exit codes in every epilog."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["EPILOG", "Formatter", "add_command"]

EPILOG = (
    "A settings file with problems is refused with one line per problem (vllm-sentinel\n"
    "check-config FILE lists them all). Exit codes: 0 ok; 1 a finding (classify: a\n"
    "critical incident; check-config, rules test: a problem); 2 bad usage, unreadable\n"
    "input or settings."
)


class Formatter(argparse.RawDescriptionHelpFormatter):
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


def add_command(
    sub: Any, name: str, summary: str, description: str, *, full: bool = True
) -> argparse.ArgumentParser:
    """A command's parser: ``summary`` in the command list; ``description`` under it
    (after the summary as its first sentence unless ``full`` is False)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}" if full else description,
        formatter_class=Formatter,
        epilog=EPILOG,
    )
    parser.add_argument(  # also after the command: ``classify -v`` (kept unless given)
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log rejected input and warnings on stderr",
    )
    return parser
