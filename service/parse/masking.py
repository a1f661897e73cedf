"""Template normalisation of one log event: variable parts become placeholders.

``mask(text)`` turns the parts of a message that change from one occurrence to the next
(numbers, sizes, durations, addresses, ids, paths, hosts, versions, quoted model names)
into placeholders, so that two occurrences of the same failure give the same template:

    >>> mask("CUDA out of memory. Tried to allocate 320.00 MiB. GPU 0 has ...")
    'CUDA out of memory. Tried to allocate <SIZE>. GPU <NUM> has ...'

It feeds three consumers: the text classifier (features are computed on masked text, so
the model learns wording, not numbers), the novelty miner (drain3 clusters masked text)
and the ``unknown`` finding, whose template is what users see for a failure no rule or
model could place. It is a pure function of the text, fast (a fixed list of pre-compiled
regular expressions, no backtracking-heavy patterns) and idempotent: masking a masked
text changes nothing.

Placeholders: ``<UUID> <URL> <TS> <IP> <HOST> <PATH> <MODEL> <VER> <SIZE> <DUR> <HEX> <NUM>``.
"""

from __future__ import annotations

import re

__all__ = ["mask", "PLACEHOLDERS"]

PLACEHOLDERS = (
    "<UUID>",
    "<URL>",
    "<TS>",
    "<IP>",
    "<HOST>",
    "<PATH>",
    "<MODEL>",
    "<VER>",
    "<SIZE>",
    "<DUR>",
    "<HEX>",
    "<NUM>",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_URL = re.compile(r"\b(?:https?|tcp|file|ipc|s3|gs|ws)://[^\s'\"<>()\]\[,]+")
# 2025-06-06 09:52:01(.123)  |  2025-06-06T09:52:01.123Z  |  06-06 09:52:01  |  E321 02:07:08.408271257
_TS = re.compile(
    r"\b(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
    r"|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\b"
)
# torch c10 log prefix "[E321 02:07:08.408271257 File.cpp:N]": keep the severity letter
_C10_TS = re.compile(r"\[([EWIF])\d{3,4} \d{2}:\d{2}:\d{2}\.\d+")
_IPV4 = re.compile(r"(?<![\w.])(?:::ffff:)?(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5}|<\d{1,5}>)?(?![\w.])")
_IPV6 = re.compile(
    r"(?<![\w:])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}(?![\w:])|(?<![\w:])::(?:ffff|1)\b"
)
# NCCL's own prefix "host:pid:tid [dev] NCCL ..." and libmlx5's "mlx5: host: got completion"
_NCCL_HOST = re.compile(r"(?m)(?:^|(?<=\] ))[A-Za-z0-9][\w.-]*:\d+:\d+ (?=\[\d+\])")
_MLX5_HOST = re.compile(r"\bmlx5: [\w.-]+:")
_HOST_KV = re.compile(r"\b(host(?:name)?|node)([=:] ?)[A-Za-z][\w.-]*[\w]", re.IGNORECASE)
# '/a/b/c.py' -> '<PATH>/c.py' (source/library file names are informative), '/dev/shm/x' -> <PATH>
_KEEP_EXT = (
    "py",
    "so",
    "cc",
    "cpp",
    "cu",
    "cuh",
    "h",
    "hpp",
    "c",
    "json",
    "safetensors",
    "bin",
    "pt",
    "pth",
    "gguf",
    "yaml",
    "yml",
    "txt",
    "model",
    "tiktoken",
    "jinja",
)
_PATH = re.compile(
    r"(?<![\w<>/.])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?"
    r"|(?<![\w<>/])[A-Za-z]:\\(?:[\w. -]+\\)+[\w. -]*"
)
# the directory segments after the "../" run never start with "." (else "../" is ambiguous
# between the two groups and a line of "../../.." backtracks cubically)
_REL_SRC = re.compile(r"(?<![\w/<>.])(?:\.\./)+(?:[\w-][\w.-]*/)+([\w.-]+\.(?:cc|cpp|h|hpp|cu|py))")
_QUOTED_MODEL = re.compile(r"""(['"`])[\w.-]+/[\w.:-]+\1""")
_VER = re.compile(
    r"(?<![\w.])v?\d+\.\d+\.\d+(?:\.\d+)*(?:[.+-]?(?:post|dev|rc|a|b)\d*)*(?:\+[\w.]+)?(?![\w])"
    r"|(?<![\w.])v\d+\.\d+(?![\w.])"
)
_SIZE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:,\d{3})* ?(?:[KMGTP]i?B|bytes?|[KMGT]B|[kmgt]b)\b")
_DUR = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)? ?(?:ms|milliseconds?|seconds?|secs?|s/it|it/s|minutes?|mins?|hours?|s)\b"
    r"|\[\d{2}:\d{2}(?::\d{2})?<(?:\d{2}:\d{2}(?::\d{2})?|\?)(?:, *[\d.]+ ?(?:s/it|it/s))?\]"
)
_HEX = re.compile(
    r"\b0x[0-9a-fA-F]+\b|(?<![\w])(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![\w-])"
)
# trailing ids glued to a word: rank3, Worker_TP1, EngineCore_DP0, VllmWorker-0
_GLUED_ID = re.compile(r"(?<=\brank)\d+\b|(?<=_(?:TP|DP|PP|EP))\d+\b|(?<=Rank )\d+\b")
_NUM = re.compile(r"(?<![\w<])\d+(?:[.,]\d+)*(?![\w>])")
_SPACES = re.compile(r"[ \t]+")
_ANY_DIGIT = re.compile(r"\d")
_HEX_LETTERS_ONLY = re.compile(r"[0-9a-fA-F]{8}")
# patterns see at most this many characters of each line (the line parser's cap)
LINE_CAP = 8192


def _path_sub(m: re.Match[str]) -> str:
    s = m.group(0).rstrip("/")
    last = s.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    if "." in last and last.rsplit(".", 1)[-1].lower() in _KEEP_EXT:
        return "<PATH>/" + last
    return "<PATH>"


def mask_lines(text: str) -> list[str]:
    """Masked lines of ``text``, one per input line (same count, same order)."""
    if not text:
        return [""]
    t = text.replace("\r", "")
    if len(t) > LINE_CAP:
        t = "\n".join(part[:LINE_CAP] for part in t.split("\n"))
    if "\x1b" in t:
        t = _ANSI.sub("", t)
    has_digit = _ANY_DIGIT.search(t) is not None
    if has_digit and "-" in t:
        t = _UUID.sub("<UUID>", t)
    if "://" in t:
        t = _URL.sub("<URL>", t)
    if has_digit and ":" in t:
        if "[" in t:
            t = _C10_TS.sub(r"[\1<TS>", t)
        t = _TS.sub("<TS>", t)
        if " [" in t:
            t = _NCCL_HOST.sub("<HOST>:<NUM>:<NUM> ", t)
    if "mlx5: " in t:
        t = _MLX5_HOST.sub("mlx5: <HOST>:", t)
    if has_digit and "." in t:
        t = _IPV4.sub("<IP>", t)
    if "::" in t or t.count(":") >= 3:
        t = _IPV6.sub("<IP>", t)
    if "/" in t:
        if "'" in t or '"' in t or "`" in t:
            t = _QUOTED_MODEL.sub(lambda m: m.group(1) + "<MODEL>" + m.group(1), t)
        if "../" in t:
            t = _REL_SRC.sub(lambda m: "<PATH>/" + m.group(1), t)
        t = _PATH.sub(_path_sub, t)
    elif ":\\" in t:
        t = _PATH.sub(_path_sub, t)
    if "=" in t or ":" in t:
        t = _HOST_KV.sub(lambda m: m.group(1) + m.group(2) + "<HOST>", t)
    if has_digit:
        if "." in t:
            t = _VER.sub("<VER>", t)
        t = _SIZE.sub("<SIZE>", t)
        t = _DUR.sub("<DUR>", t)
        t = _HEX.sub("<HEX>", t)
        if "rank" in t or "_" in t or "Rank" in t:
            t = _GLUED_ID.sub("<NUM>", t)
        t = _NUM.sub("<NUM>", t)
    elif "0x" in t or _HEX_LETTERS_ONLY.search(t):
        t = _HEX.sub("<HEX>", t)
    if "  " in t or "\t" in t:
        t = _SPACES.sub(" ", t)
    return [line.strip() for line in t.split("\n")]


def mask(text: str) -> str:
    """Return ``text`` with its variable parts replaced by placeholders (see module doc)."""
    if not text:
        return ""
    return "\n".join(mask_lines(text)).strip()
