"""Runs and stages of one stream: when a new run starts (a banner, another API server pid,
a startup marker after a failed or stopped run went quiet, a new container), how the stage
advances (skipped rungs are implied), and what getting past a stage resolves (a stall of
this run; a failure of an earlier run, of this pod or of the pod it replaced).

Functions over one :class:`StreamState`; the incidents they resolve are appended to
``changes`` as :class:`Change` records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from service.classify.judgements.stalls import is_stall
from service.classify.run_state import RunState
from service.classify.stream_state import FAILED, STARTING, STOPPED, StreamState
from service.incidents.incident import Change, Incident
from service.parse import line as L
from service.taxonomy import STAGE_INDEX, later_stage


def is_new_run(st: StreamState) -> bool:
    """Whether a run-start signal now starts a new run (not the current run's own start)."""
    if st.status in (FAILED, STOPPED):
        return True
    if st.stage is None:
        return False
    return st.status != STARTING or STAGE_INDEX[st.stage] >= STAGE_INDEX["distributed_init"]


def restart_signal(
    st: StreamState,
    line: L.Line,
    stage_marker: bool,
    time: float | None,
    prev: float | None,
    gap_s: float,
) -> bool:
    """A new run without a banner: another API server process (a new pid), or a startup
    stage marker after a failed or stopped run went quiet (a later start: ``gap_s`` after
    ``prev``, the time of the stream's line before this one; ``judgements.yaml``
    ``restarts.gap_s``)."""
    pid = st.checks.api_pid
    if line.process == "APIServer" and pid is not None and line.pid not in (None, pid):
        return True
    if not stage_marker or st.status not in (FAILED, STOPPED):
        return False
    return st.status == STOPPED or (prev is not None and time is not None and time - prev >= gap_s)


def new_run(st: StreamState, time: float | None) -> None:
    """Start the stream's next run (``time``: its first line's, else the first that has one)."""
    st.run += 1
    st.stage = None
    st.timeline = {}
    st.status = STARTING
    st.shutting_down = False
    st.frame_hint = {}
    # the accelerator platform is the machine's, not the run's: a restart keeps it
    st.facts = {k: v for k, v in st.facts.items() if k == "platform"}
    st.first_time = time
    st.checks = RunState()  # what the checks count, per run


def advance(st: StreamState, stage: str, time: float | None, changes: list[Change]) -> bool:
    """Move the stream to ``stage`` (the rungs it skipped are implied); a stall of this run
    in an earlier stage is resolved. False when ``stage`` is not past the current one."""
    if st.stage is not None and STAGE_INDEX[stage] <= STAGE_INDEX[st.stage]:
        return False
    start = STAGE_INDEX[st.stage] + 1 if st.stage else STAGE_INDEX[stage]
    for s in list(STAGE_INDEX)[start : STAGE_INDEX[stage] + 1]:
        st.timeline.setdefault(s, time if time is not None else st.seq)
    st.stage = stage
    st.last_stage_change = time
    for inc in list(st.incidents):
        if (
            inc.run == st.run
            and inc.status == "open"
            and is_stall(inc.primary.rule)
            and STAGE_INDEX[stage] > STAGE_INDEX[inc.stage]
        ):
            inc.status, inc.resolved_at = "resolved", time
            inc.resolution = f"the stream moved on to {stage}"
            st.incidents.remove(inc)
            if st.status == FAILED:
                st.status = STARTING
            changes.append(Change("resolved", inc))
    return True


def resolve_passed(
    st: StreamState,
    time: float | None,
    changes: list[Change],
    replaced: Callable[[StreamState], Iterable[Incident]],
    find: Callable[[str], StreamState | None],
    ready: bool = False,
) -> None:
    """A later run (of this pod, or of the pod that replaced it: ``replaced(st)``, the open
    failures it continues) that gets past the failing stage, or is ``ready``, resolves the
    incident (taken off its owner's stream, ``find(key)``)."""
    mine = [i for i in st.incidents if i.run < st.run and i.pending_restart is None]
    for inc in mine + list(replaced(st)):
        if inc.status != "open" or inc.severity != "critical":
            continue
        failed_at = later_stage(inc.stage, inc.extra.get("reached")) or inc.stage
        if ready or (st.stage and STAGE_INDEX[st.stage] > STAGE_INDEX[failed_at]):
            inc.status = "resolved"
            inc.resolved_at = time
            who = (
                "the workload"
                if inc.stream == st.key
                else f"the workload (pod {st.meta.get('pod') or st.key})"
            )
            inc.resolution = f"run {st.run} of {who} got past {inc.stage}" + (
                " and is ready" if ready else f" (reached {st.stage})"
            )
            owner = st if inc.stream == st.key else find(inc.stream)
            if owner is not None and inc in owner.incidents:
                owner.incidents.remove(inc)
            changes.append(Change("resolved", inc))
