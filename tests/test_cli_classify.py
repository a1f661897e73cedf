"""``vllm-sentinel classify`` never answers "healthy" by silence: unreadable input exits 2
with a message, a format override that drops the lines says so."""

from __future__ import annotations

import json
import subprocess
import sys
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


# ---- first-hour trips (#22): the real process ----------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def cli(*argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,  # type: ignore[call-overload]
    )


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``classify ... | head -1``: no BrokenPipeError traceback (more reports than a pipe
    holds)."""
    copies = [tmp_path / f"pod-{i}.log" for i in range(80)]
    for path in copies:
        path.write_bytes(KV.read_bytes())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "classify",
            "--json",
            "--no-model",
            *map(str, copies),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as head -1 does after its line
    err = proc.stderr.read().decode()
    proc.wait(120)
    assert first.startswith(b"{")
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode in (0, 1, 141)


def test_verbose_is_accepted_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["classify", "-v", "--no-model", str(KV)])
    assert code == 1  # the KV-cache failure, not a usage error
    assert capsys.readouterr().out.startswith(f"== {KV}: failed")


def test_an_executable_is_refused_not_read_as_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = cli("classify", "--no-model", sys.executable)
    assert run.returncode == 2
    assert "is an executable, not a log" in run.stderr and run.stdout == ""
    blob = tmp_path / "core.bin"
    blob.write_bytes(bytes(range(256)) * 64)
    assert main(["classify", "--no-model", str(blob)]) == 2
    assert "is a binary file, not a log" in capsys.readouterr().err
    padded = tmp_path / "truncated.log"  # NUL padding of a copytruncate'd log is still a log
    padded.write_bytes(b"\0" * 4096 + KV.read_bytes())
    assert main(["classify", "--no-model", str(padded)]) == 1


def test_the_stage_reached_is_never_nothing_above_a_failure_at_a_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "serving.log"
    log.write_text(
        "ERROR 12-02 10:00:01 [async_llm_engine.py:61] Engine background task failed\n"
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.\n"
    )
    main(["classify", "--no-model", "--json", str(log)])
    rep = json.loads(capsys.readouterr().out.splitlines()[0])
    assert rep["incidents"], rep
    assert rep["stage"] == rep["incidents"][0]["stage"]
    main(["classify", "--no-model", str(log)])
    human = capsys.readouterr().out
    assert "reached nothing" not in human and f"reached {rep['stage']}" in human
