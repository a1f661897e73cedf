"""Parse one physical log line of a vLLM container into its parts.

Tolerant across vLLM eras: ANSI colours (real escapes and caret residue like ``^[[36m``),
trailing ``\\r`` from the multi-line formatter, outer wrappers (docker compose ``vllm-1  | ``,
collector/CI timestamps, Slurm ``0: ``, torch ``[rank0]:``, kubectl ``[pod/x/y]``), zero to
two process prefixes (``(APIServer pid=1) (EngineCore_DP0 pid=68)``,
``(VllmWorker rank=3 pid=9)``, ``(RayWorkerWrapper pid=4, ip=10.0.0.1)``), the three header
eras (``file.py:12]``, ``[file.py:12]``, ``[v1/x/y.py:12]``), uvicorn lines, NCCL's own lines,
torch c10 lines, Python tracebacks and warnings. Severity is reported but never trusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.parse.paste import unpasted

# Line kinds.
VLLM = "vllm"
UVICORN = "uvicorn"
NCCL = "nccl"
TORCH = "torch"
TRACEBACK = "traceback"  # "Traceback (most recent call last):"
FRAME = "frame"  # '  File "x.py", line 3, in f'
CODE = "code"  # indented source line / caret line inside a traceback
EXCEPTION = "exception"  # "ValueError: ..."
CHAIN = "chain"  # "The above exception was the direct cause ..."
WARNING = "warning"  # "/x.py:3: UserWarning: ..."
PROCESS = "process"  # "Process EngineCore_DP0:"
PLAIN = "plain"
EMPTY = "empty"

_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][AB0-2]|\^\[\[[0-9;]*[A-Za-z]|#033\[[0-9;]*[A-Za-z]"
    r"|(?<![\w\]])\[[0-9]{1,3}(?:;[0-9]{1,3})*m(?=[\s(\[]|$)"  # residue whose ESC was lost
)
_ANSI_HINT = re.compile(r"\x1b|\^\[\[|#033\[|\[\d{1,3}(?:;\d{1,3})*m")

# Fast path: optional process prefixes + vLLM header.
_PREFIX = r"\((?P<proc>[A-Za-z_][\w ]*?(?: (?:TP )?rank=\d+)?) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)]*))?\)\s+"
_PREFIXES = re.compile(rf"(?:{_PREFIX})+")
_HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +"
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? +"
    r"\[?(?P<file>[^\]\s:]+):(?P<lineno>\d+)\]? ?(?P<msg>.*)",
    re.S,
)
_UVICORN = re.compile(r"(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\s+(?P<msg>.*)", re.S)
_NCCL = re.compile(
    r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./\-]+:\d+) )?(?:\(\w+\) )?NCCL (?P<level>INFO|WARN|ERROR|TRACE|ABORT) ?(?P<msg>.*)",
    re.S,
)
_TORCH = re.compile(
    r"\[(?P<level>[EWIF])(?:\d{3,4} [\d:.]+(?: \d+)?)? ?(?P<src>[\w.]+:\d+)\] ?(?P<msg>.*)", re.S
)
# A severity written by another program's logger near the start of a plain line.
_PLAIN_LEVEL = re.compile(
    r"\b(?:ERROR|FATAL|CRITICAL|PANIC|ERR|EMERG)\b|level=(?:error|fatal|panic|crit)"
    r"|\[(?:error|fatal|crit|E)\]|^(?:[\w.\-]+: )?(?:error|fatal)(?:\[\w+\])?:"
)
# glog (C++ services: Mooncake, NIXL, ...): "E1203 12:00:00.123456  1234 file.cc:42] msg"
_GLOG = re.compile(
    r"(?P<level>[EWIF])(?:\d{4}|\d{8}) \d\d:\d\d:\d\d(?:\.\d+)?[ \t]+(?:\d+[ \t]+)?"
    r"(?P<src>[\w.\-/]+:\d+)\] ?(?P<msg>.*)",
    re.S,
)
_FRAME = re.compile(r'\s*File "(?P<path>[^"]+)", line (?P<lineno>\d+), in (?P<func>[\w<>.]+)')
_EXCEPTION = re.compile(
    r"(?P<exc>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault))"
    r"(?::\s*(?P<msg>.*))?$",
    re.S,
)
_PYWARNING = re.compile(
    r"(?P<path>\S+?\.py):(?P<lineno>\d+): (?P<cat>\w*Warning): (?P<msg>.*)", re.S
)
_PROCESS = re.compile(r"Process [\w\-]+:$")
_CHAINS = (
    "The above exception was the direct cause",
    "During handling of the above exception",
)

# Outer wrappers added by deployments and log viewers (stripped repeatedly, in any order).
_WRAPPERS = re.compile(
    r"(?:"
    r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: ?(?:Z|[+-]\d\d:?\d\d|UTC))?\]?[ \t]+(?:\|[ \t]+)?"  # ISO ts (+ viewer "| ")
    r"|(?:[A-Z][a-z]{2}|\d{1,2}\u6708) [ \d]\d \d\d:\d\d:\d\d [\w.\-]+ [\w.\-@]+(?:\[\d+\])?: "  # syslog/journald (any locale's month)
    r"|\|?\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|SUCCESS|TRACE)\s*\|\s*\S+ - "  # loguru
    r"|[\w.\-]+(?:[-_]\d+)?[ \t]+\| "  # docker compose "vllm-1  | "
    r"|\[pod/[^\]]+\] "  # kubectl logs --prefix
    r"|-?\s*[\w.<>]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "  # python logging default
    r"|\d{1,4}: "  # srun --label
    r"|\[[ \t]*\d{1,10}\.\d{6}\][ \t]*"  # dmesg / kernel ring buffer time
    r"|[\w.\-]+\.exe : "  # PowerShell's NativeCommandError: a native program's stderr line
    r")"
)
# A Rich console layout (SGLang, Ray, Dynamo): time column (blank on continuation lines),
# the level in its own padded column, the message, the logger's file right-aligned.
_RICH = re.compile(
    r"(?:\[[\d/:.,\- ]{8,26}\]|[ \t]{8,})[ \t]*(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)[ \t]{1,8}"
    r"(?P<msg>\S.*?)(?:[ \t]{2,}(?P<file>[\w.\-]+\.py):(?P<lineno>\d+))?[ \t]*$",
    re.S,
)
_TORCH_RANK = re.compile(r"\[rank(?P<rank>\d+)\]: ?")
_REPEATED = re.compile(r"\[repeated (?P<n>\d+)x across cluster\]\s*$")
_RANK_IN_NAME = re.compile(r"(?:rank=|_TP|TP)(\d+)")

# Every pattern of this module (and every rule downstream, which sees ``Line.message``) reads
# at most this many characters of a line: a crafted megabyte line costs what 8 KiB costs.
# ``Line.text`` still holds the whole line, for evidence.
PATTERN_CAP = 8192

_LEVELS = {"WARN": "WARNING", "E": "ERROR", "W": "WARNING", "I": "INFO", "F": "CRITICAL"}


@dataclass(slots=True)
class Line:
    """One parsed physical line. ``message`` is the payload that rules match."""

    text: str
    message: str
    kind: str = PLAIN
    level: str | None = None
    process: str | None = None
    pid: int | None = None
    rank: int | None = None
    fileinfo: str | None = None
    func: str | None = None  # traceback frame function
    path: str | None = None  # traceback frame file
    exc: str | None = None  # exception type of an EXCEPTION line
    repeated: int = 1

    @property
    def proc_key(self) -> str:
        """Identifies the emitting process within a stream (for joining tracebacks)."""
        if self.process is None:
            return f"rank{self.rank}" if self.rank is not None else "-"
        return f"{self.process}:{self.pid}"


def clean(text: str) -> str:
    """Strip ANSI, trailing CR/LF and tqdm ``\\r`` redraws, keeping the last state."""
    if (
        "\x1b" in text or "[0m" in text or "#033[" in text or "^[[" in text or "[36m" in text
    ) and _ANSI_HINT.search(text):
        text = _ANSI.sub("", text)
    text = text.rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text


def parse_line(raw: str, *, pasted: bool = True) -> Line:
    """Parse one physical line; never raises. Patterns see its first ``PATTERN_CAP`` chars;
    ``pasted``: undo one layer of paste decoration first."""
    if len(raw) > PATTERN_CAP:
        line = parse_line(raw[:PATTERN_CAP])
        line.text = line.text + raw[PATTERN_CAP:].rstrip("\r\n")
        return line
    text = clean(raw)
    if not text.strip():
        return Line(text=text, message="", kind=EMPTY)
    if pasted:
        bare = unpasted(text)
        if bare != text:
            line = (
                parse_line(bare, pasted=False)
                if bare.strip()
                else Line(text=bare, message="", kind=EMPTY)
            )
            line.text = text  # evidence shows the line as it came
            return line

    # Fast path: vLLM header, optionally behind process prefixes.
    process = pid = rank = None
    rest = text
    if text[0] in " \t":
        stripped = text.lstrip()
        if stripped[:1] == "(" or _HEADER.match(stripped) or _GLOG.match(stripped):
            rest = text = stripped
    if text[0] == "(":
        m = _PREFIXES.match(text)
        if m:
            process, pid = m.group("proc"), int(m.group("pid"))
            if m.group("ip"):
                process = f"{process}@{m.group('ip')}"
            rest = text[m.end() :]
    h = _HEADER.match(rest)
    if h is None and rest[:1].isupper() and rest[4:5] in (":", "I", "N", "R", "G", "C"):
        u = _UVICORN.match(rest)
        if u:
            line = Line(
                text=text,
                message=u.group("msg"),
                kind=UVICORN,
                level=u.group("level"),
                process=process,
                pid=pid,
            )
            return line
    if h is None and (rest[:1] == "[" or rest[:8].isspace()):
        r = _RICH.match(rest)
        if r:
            line = Line(
                text=text,
                message=r.group("msg"),
                kind=VLLM,
                level=r.group("level"),
                process=process,
                pid=pid,
                fileinfo=f"{r.group('file')}:{r.group('lineno')}" if r.group("file") else None,
            )
            _refine_payload(line)
            return line
    if h is None:
        # Slow path: outer wrappers, then prefixes again.
        rest, rank, repeated = _strip_wrappers(rest)
        if process is None and rest[:1] == "(":
            m = _PREFIXES.match(rest)
            if m:
                process, pid = m.group("proc"), int(m.group("pid"))
                rest = rest[m.end() :]
        h = _HEADER.match(rest)
    else:
        repeated = 1
        if rest.endswith("cluster]"):
            rest, repeated = _strip_repeated(rest)
            h = _HEADER.match(rest)
    if process is not None and rank is None:
        r = _RANK_IN_NAME.search(process)
        if r:
            rank = int(r.group(1))
    if h is not None:
        level = h.group("level")
        line = Line(
            text=text,
            message=h.group("msg"),
            kind=VLLM,
            level=_LEVELS.get(level, level),
            process=process,
            pid=pid,
            rank=rank,
            fileinfo=f"{h.group('file')}:{h.group('lineno')}",
            repeated=repeated,
        )
        _refine_payload(line)
        return line
    line = Line(text=text, message=rest, process=process, pid=pid, rank=rank, repeated=repeated)
    _classify_other(line)
    return line


def _strip_repeated(rest: str) -> tuple[str, int]:
    at = rest.rfind("[repeated ")
    m = _REPEATED.match(rest, at) if at >= 0 else None
    if m:
        return rest[:at].rstrip(), int(m.group("n"))
    return rest, 1


def _strip_wrappers(rest: str) -> tuple[str, int | None, int]:
    rank = None
    repeated = 1
    if rest.endswith("cluster]"):
        rest, repeated = _strip_repeated(rest)
    for _ in range(4):
        m = _WRAPPERS.match(rest)
        if m is None:
            r = _TORCH_RANK.match(rest)
            if r is None:
                break
            rank = int(r.group("rank"))
            rest = rest[r.end() :]
            continue
        rest = rest[m.end() :]
    return rest, rank, repeated


def _refine_payload(line: Line) -> None:
    """A logged traceback repeats the vLLM header on every line: classify its payload."""
    msg = line.message
    if not msg:
        return
    c = msg[0]
    if c == " " or c == "\t":
        f = _FRAME.match(msg)
        if f:
            line.kind, line.func, line.path = FRAME, f.group("func"), f.group("path")
        elif msg.strip():
            line.kind = CODE
        return
    if c == "T" and msg.startswith("Traceback (most recent call last)"):
        line.kind = TRACEBACK
        return
    if c == "^" or c == "~":
        line.kind = CODE
        return
    if _maybe_exception(msg):
        e = _EXCEPTION.match(msg)
        if e:
            line.kind, line.exc = EXCEPTION, e.group("exc")


_EXC_WORDS = ("Error", "Exception", "Exit", "Interrupt", "Failure", "Fault")


def _maybe_exception(msg: str) -> bool:
    """Cheap test before the exception regex: the first word names an exception type."""
    head = msg.split(":", 1)[0] if ":" in msg else msg
    return " " not in head and head.endswith(_EXC_WORDS)


# libstdc++'s verbose terminate handler prints an uncaught C++ exception (TensorRT-LLM, ONNX
# Runtime, c10, ggml, TGI's shards ...) as "terminate called after throwing an instance of
# 'T'" and then, indented, "  what():  <its text>": that text is the failure, not source code.
_WHAT = "what():"


def _classify_other(line: Line) -> None:
    msg = line.message
    c = msg[0] if msg else ""
    if c in " \t":
        f = _FRAME.match(msg)
        if f:
            line.kind, line.func, line.path = FRAME, f.group("func"), f.group("path")
            return
        bare = msg.lstrip()
        e = _EXCEPTION.match(bare) if _maybe_exception(bare) else None
        if e and ":" in bare:  # "  RuntimeError: CUDA error: ..." pasted with an indent
            line.kind, line.exc, line.level, line.message = EXCEPTION, e.group("exc"), "ERROR", bare
            return
        if bare.startswith(_WHAT):  # a C++ exception's text after "terminate called ..."
            line.level, line.message = "ERROR", bare
            return
        line.kind = CODE
        return
    if c in "^~":
        line.kind = CODE
        return
    if c == "T" and msg.startswith("Traceback (most recent call last)"):
        line.kind = TRACEBACK
        return
    if c in "EWIF" and msg[1:2].isdigit():
        g = _GLOG.match(msg)
        if g:
            line.kind, line.level, line.message = TORCH, _LEVELS[g.group("level")], g.group("msg")
            line.fileinfo = g.group("src")
            return
    if c == "[":
        t = _TORCH.match(msg)
        if t:
            line.kind, line.level, line.message = TORCH, _LEVELS[t.group("level")], t.group("msg")
            line.fileinfo = t.group("src")
            return
    if c.isupper():
        u = _UVICORN.match(msg)
        if u:
            line.kind, line.level, line.message = UVICORN, u.group("level"), u.group("msg")
            return
    if " NCCL " in msg:
        n = _NCCL.match(msg)
        if n:
            lvl = n.group("level")
            line.kind, line.message = NCCL, f"NCCL {lvl} {n.group('msg')}"
            line.level = {"WARN": "WARNING", "ABORT": "ERROR"}.get(lvl, lvl)
            line.fileinfo = n.group("src")
            if line.rank is None:
                line.rank = int(n.group("dev"))
            return
    if ".py:" in msg:
        w = _PYWARNING.match(msg)
        if w:
            line.kind, line.level, line.message = (
                WARNING,
                "WARNING",
                f"{w.group('cat')}: {w.group('msg')}",
            )
            line.exc = w.group("cat")
            return
    if msg.startswith(_CHAINS):
        line.kind = CHAIN
        return
    if msg.startswith("Process ") and _PROCESS.match(msg):
        line.kind = PROCESS
        return
    e = _EXCEPTION.match(msg) if _maybe_exception(msg) else None
    if e:
        line.kind, line.exc, line.level = EXCEPTION, e.group("exc"), "ERROR"
        return
    if line.level is None and (msg.startswith(_WHAT) or _PLAIN_LEVEL.search(msg[:80])):
        line.level = "ERROR"
