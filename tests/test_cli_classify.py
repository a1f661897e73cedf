"""``vllm-sentinel classify`` never answers "healthy" by silence: unreadable input exits 2
with a message, a format override that drops the lines says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.cli import main

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
KV = REAL / "kv-cache-too-small.cri.log"


def docker_json(src: Path, dst: Path) -> Path:
    """A real capture as Docker's json-file driver writes it."""
    with dst.open("w") as out:
        for line in src.read_text().splitlines():
            msg = line.split(" ", 3)[3] if line.count(" ") >= 3 else line
            out.write(
                json.dumps(
                    {
                        "log": msg + "\n",
                        "stream": "stdout",
                        "time": "2025-01-01T00:00:00.000000000Z",
                    }
                )
                + "\n"
            )
    return dst


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda d: d / "missing.log", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: (d / "empty.log").write_text("") or d / "empty.log", "is empty"),
    ],
)
def test_unreadable_input_exits_2_with_a_message(tmp_path, capsys, make, why) -> None:
    path = make(tmp_path)
    assert main(["classify", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and why in out.err and str(path) in out.err


def test_a_format_override_that_drops_the_lines_warns_and_exits_2(tmp_path, capsys) -> None:
    log = docker_json(KV, tmp_path / "c-json.log")
    assert main(["classify", "--format", "cri", "--no-model", str(log)]) == 2
    err = capsys.readouterr().err
    assert "--format cri kept 0 of" in err and "no log lines could be read" in err


def test_the_same_file_auto_detected_is_classified(tmp_path, capsys) -> None:
    log = docker_json(KV, tmp_path / "c-json.log")
    assert main(["classify", "--json", "--no-model", str(log)]) == 1  # an open critical
    rep = json.loads(capsys.readouterr().out.splitlines()[0])
    assert rep["incidents"][0]["category"] == "oom_kv_cache"
