"""Crash loops (block ``restarts``): a workload that failed to start the same way
``crash_loop_attempts`` times, or whose container Kubernetes backs off restarting, is a
crash loop - one notification saying whether restarting can help (the playbook's
``restarts``).

The block also holds the numbers of the restart judgement itself (``restarts.py``): how long
after a failed run a start marker is a new run (``gap_s``), how long a restart's undecided
failure waits for its root cause (``pending_wait_s``). The setting
``restarts.crash_loop_attempts`` wins when given.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from service.classify.judgements.judge import Blocks, Config, Judge, Kind
from service.classify.judgements.playbook import restart_advice
from service.classify.rules import PlaybookRules
from service.incidents.incident import CrashLoop, Incident

CRASH_LOOP_RULE = "k8s-crash-loop-backoff"


class RestartRules(Config):
    crash_loop_attempts: int = Field(ge=2)
    gap_s: float = Field(ge=0)
    pending_wait_s: float = Field(ge=0)


def _verdict(helps: bool) -> str:
    return "restarting will not help: " if not helps else "restarting has not helped: "


class CrashLoops(Judge):
    def __init__(self, rules: RestartRules, playbook: PlaybookRules) -> None:
        self.attempts = max(2, int(rules.crash_loop_attempts))
        self.playbook = playbook

    def restarted(self, inc: Incident) -> CrashLoop | None:
        """``inc`` failed the same way once more: a crash loop at the configured count."""
        attempts = inc.restarts + 1
        if attempts < self.attempts:
            return None
        helps, why = restart_advice(inc.category, self.playbook)
        note = (
            f"crash loop: failed the same way {attempts} times ("
            f"{inc.restarts} restart{'s' if inc.restarts != 1 else ''}); " + _verdict(helps) + why
        )
        return CrashLoop(helps, note, attempts=self.attempts)

    def evidence(self, inc: Incident, rules: Sequence[str]) -> CrashLoop | None:
        """A crash-loop back-off alone on a stream with an open failure confirms that
        failure's crash loop (None: the line is classified as any other)."""
        if list(rules) != [CRASH_LOOP_RULE]:
            return None
        helps, why = restart_advice(inc.category, self.playbook)
        note = "crash loop: Kubernetes backs off restarting the container; " + _verdict(helps)
        return CrashLoop(helps, note + why, source="kubernetes")


def _judge(rules: RestartRules, _: Blocks, playbook: PlaybookRules) -> Judge:
    return CrashLoops(rules, playbook)


KIND = Kind("restarts", RestartRules, _judge, runs=50)
