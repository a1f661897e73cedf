"""What pasting a log (tickets, chat, wikis) adds around a line: markdown quotes, table
pipes, list bullets, code fences and emphasis; a CI viewer's gutter; a tqdm bar glued in
front of the real message. :func:`unpasted` takes it off again."""

from __future__ import annotations

import re

DECOR_START = frozenset(">|`*-+\u2022")
_QUOTE = re.compile(r"[ \t]*(?:>[ \t]?)+")
_BULLET = re.compile(r"[ \t]*(?:[-*+\u2022])[ \t]+(?=\S)")
_FENCE = re.compile(r"[ \t]*(?:```|~~~)[\w+-]*[ \t]*$")
_TQDM_TAIL = re.compile(r"\d{1,3}%\|[^|\n]{0,200}\|[^\]\n]{0,160}\]")


def undecorate(text: str) -> str:
    """Remove what pasting added around a log line (never the line's own indentation of a
    traceback frame: a quote marker and one space go, the frame's spaces stay)."""
    if _FENCE.match(text):
        return ""
    c = text.lstrip()[:1]
    if c == ">":
        text = _QUOTE.sub("", text, count=1)
    elif c == "|" and text.count("|") == 2 and text.rstrip().endswith("|"):
        text = text.strip()[1:-1].strip()  # a markdown table cell
    elif c in "-*+\u2022" and not text.lstrip().startswith(("**", "--", "++")):
        m = _BULLET.match(text)
        if m and not text[m.end() :].startswith(("-", "*")):
            text = text[m.end() :]
    if text.lstrip().startswith("**"):
        text = text.replace("**", "")
    if text.lstrip().startswith("`"):
        text = text.strip().strip("`")
    if text.lstrip()[:2] == "| " and text.count("|") == 1:
        text = text.lstrip()[2:]  # a CI viewer's gutter ("  | [ts] ...")
    if "%|" in text:
        tail = None
        for m in _TQDM_TAIL.finditer(text):
            tail = m
        if tail is not None and text[tail.end() :].strip():
            text = text[tail.end() :].lstrip()
    return text


def unpasted(text: str) -> str:
    """``text`` without up to three layers of paste decoration (a quote around a CI gutter
    around a bullet ...); ``text`` itself when it has none."""
    if not (text[0] in DECOR_START or "%|" in text):
        return text
    bare = undecorate(text)
    for _ in range(2):
        again = undecorate(bare) if bare[:1] in DECOR_START or bare.lstrip()[:2] == "| " else bare
        if again == bare:
            break
        bare = again
    return bare
