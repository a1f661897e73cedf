"""``vllm-sentinel`` command line: classify, train, evaluate, serve, check-config,
notify-test, rules, feedback-export.

:func:`main` parses the command line and runs one command; each command lives in the
module of its group (:mod:`.classify`, :mod:`.model`, :mod:`.serve`, :mod:`.notify`, :mod:`.rules`) and
imports what it runs only when it runs. A settings problem is one line on stderr per
problem and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import classify, model, notify, rules, serve
from .usage import EPILOG, Formatter

__all__ = ["main"]

# the commands, in the order ``vllm-sentinel --help`` lists them
COMMANDS = (
    classify.add_parser,
    model.add_train,
    model.add_evaluate,
    serve.add_serve,
    serve.add_check_config,
    notify.add_parser,
    rules.add_parser,
    model.add_feedback_export,
)


def _parser() -> argparse.ArgumentParser:
    from service import __version__

    p = argparse.ArgumentParser(
        prog="vllm-sentinel",
        formatter_class=Formatter,
        epilog=EPILOG,
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
    for add in COMMANDS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    from service.configcheck import ConfigError
    from service.netguard import InsecureConfigError

    if args.cmd != "serve":  # a service logs at INFO (serve configures it; -v changes nothing)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.ERROR,
            format="%(levelname)s %(name)s: %(message)s",
        )
    try:
        return int(args.run(args))
    except BrokenPipeError:  # ``classify ... | head -1``: the reader is gone, stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 141  # as a process a SIGPIPE ended (128 + 13)
    except ConfigError as exc:  # one line per problem, never a traceback
        for problem in exc.problems:
            print(f"vllm-sentinel {args.cmd}: {problem}", file=sys.stderr)
        return 2
    except InsecureConfigError as exc:
        print(f"vllm-sentinel {args.cmd}: {exc}", file=sys.stderr)
        return 2
