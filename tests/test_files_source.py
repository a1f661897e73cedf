"""File / stdin source: plain, gzip, Docker and CRI files, bad bytes, bounds."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.ingest.timestamps import parse_rfc3339
from service.sources.files import read_file, read_files
from tests.ingest_samples import (
    CONTAINER_ID,
    ENGINE_FAILED,
    KV_CACHE,
    NAMESPACE,
    NCCL_WARN,
    NO_KERNEL,
    POD,
    POD_ID,
    ROUTES,
    STARTUP,
    lines_in,
    rejects,
)

VLLM_LOG = "\n".join([ROUTES, STARTUP, NO_KERNEL, NCCL_WARN, ENGINE_FAILED]) + "\n"


def test_plain_file_lines_positions_and_stream(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("vllm.log").write_text(VLLM_LOG)
    records = list(read_files(["vllm.log"]))
    assert [r.text for r in records] == [ROUTES, STARTUP, NO_KERNEL, NCCL_WARN, ENGINE_FAILED]
    assert [str(r.position) for r in records] == [f"file:vllm.log:{i}" for i in range(1, 6)]
    assert {r.stream for r in records} == {"vllm.log"}  # the path as given
    assert all(r.time is None and r.meta == {} for r in records)


def test_last_line_without_newline_and_crlf_are_kept(tmp_path):
    path = tmp_path / "w.log"
    path.write_bytes(b"first\r\nsecond")
    assert [r.text for r in read_file(str(path))] == ["first\r", "second"]


def test_gzip_rotated_file_is_detected_by_magic_not_name(tmp_path):
    path = tmp_path / "0.log.20260727-101112"  # kubelet rotation name, no .gz
    with gzip.open(path, "wt") as fh:
        fh.write(VLLM_LOG)
    assert [r.text for r in read_file(str(path))][:2] == [ROUTES, STARTUP]


def test_gzip_with_several_members(tmp_path):
    path = tmp_path / "x.log.gz"
    path.write_bytes(gzip.compress(b"one\n") + gzip.compress(b"two\n"))
    assert [r.text for r in read_file(str(path))] == ["one", "two"]


def test_docker_json_file_with_16k_partials_is_joined(tmp_path):
    big = "(APIServer pid=1) INFO 07-27 10:11:12 [api_server.py:1] " + "k=v " * 9000
    parts = [big[:16384], big[16384:32768], big[32768:] + "\n"]
    lines = [
        json.dumps({"log": p, "stream": "stdout", "time": "2026-07-27T10:11:12.1Z"}) for p in parts
    ]
    lines.append(
        json.dumps({"log": ROUTES + "\n", "stream": "stdout", "time": "2026-07-27T10:11:13Z"})
    )
    path = tmp_path / f"{CONTAINER_ID}-json.log"
    path.write_text("\n".join(lines) + "\n")
    records = list(read_file(str(path)))
    assert [r.text for r in records] == [big, ROUTES]
    assert (
        str(records[0].position) == f"file:{path}:1"
        and str(records[1].position) == f"file:{path}:4"
    )


def test_cri_file_under_var_log_pods_names_the_workload(tmp_path):
    pod_dir = tmp_path / "var/log/pods" / f"{NAMESPACE}_{POD}_{POD_ID}" / "vllm"
    pod_dir.mkdir(parents=True)
    path = pod_dir / "1.log"  # after one container restart
    path.write_text(
        f"2026-07-27T10:11:12.123456789Z stdout F {ROUTES}\n"
        f"2026-07-27T10:11:13.000000001Z stderr P {'part-' * 10}\n"
        f"2026-07-27T10:11:13.000000002Z stderr F end\n"
    )
    records = list(read_file(str(path)))
    assert [r.text for r in records] == [ROUTES, "part-" * 10 + "end"]
    assert {r.stream for r in records} == {f"{NAMESPACE}/{POD}/vllm"}
    assert records[1].meta == {
        "namespace": NAMESPACE,
        "pod": POD,
        "pod_id": POD_ID,
        "container": "vllm",
        "fd": "stderr",
    }
    assert records[0].time == 1785147072.1234567


def test_invalid_utf8_is_kept_replaced_and_counted_once_per_line(tmp_path):
    path = tmp_path / "bad.log"
    path.write_bytes(b"model caf\xe9 loaded \xff\xfe\n" + ROUTES.encode() + b"\nna\xefve\n")
    before = rejects("file", "invalid_utf8")
    records = list(read_file(str(path)))
    assert [r.text for r in records] == [
        "model caf\ufffd loaded \ufffd\ufffd",
        ROUTES,
        "na\ufffdve",
    ]
    assert rejects("file", "invalid_utf8") == before + 2


def test_nul_padding_is_removed_and_binary_junk_dropped(tmp_path):
    path = tmp_path / "crash.log"
    junk = bytes(b for b in range(256) if b != 10) * 2
    path.write_bytes(
        b"\x00" * 4096 + ROUTES.encode() + b"\n" + junk + b"\n" + STARTUP.encode() + b"\n"
    )
    nul, binary = rejects("file", "nul_bytes"), rejects("file", "binary")
    records = list(read_file(str(path)))
    assert [r.text for r in records] == [ROUTES, STARTUP]
    assert [str(r.position) for r in records] == [f"file:{path}:1", f"file:{path}:3"]
    assert rejects("file", "nul_bytes") == nul + 2
    assert rejects("file", "binary") == binary + 1


def test_oversize_line_is_cut_and_the_rest_skipped(tmp_path):
    path = tmp_path / "huge.log"
    path.write_bytes(b"a" * 5000 + b"\n" + KV_CACHE.encode() + b"\n" + "é".encode() * 3000 + b"\n")
    before = rejects("file", "oversize")
    records = list(read_file(str(path), max_line=1001))
    assert [r.text for r in records] == ["a" * 1001, KV_CACHE, "é" * 500]  # cut on a char boundary
    assert str(records[1].position) == f"file:{path}:2"
    assert rejects("file", "oversize") == before + 2


def test_oversize_line_spanning_many_blocks_does_not_accumulate(tmp_path, monkeypatch):
    monkeypatch.setattr("service.sources.files._BLOCK", 64)
    path = tmp_path / "huge.log"
    path.write_bytes(b"b" * 10_000 + b"\nafter\n")
    assert [r.text for r in read_file(str(path), max_line=100)] == ["b" * 100, "after"]


def test_stdin_dash(tmp_path):
    stdin = io.BytesIO(gzip.compress(VLLM_LOG.encode()))
    records = list(read_files(["-"], stdin=stdin))
    assert len(records) == 5
    assert {r.stream for r in records} == {"stdin"} and str(records[0].position) == "file:-:1"


def test_explicit_stream_and_format(tmp_path):
    path = tmp_path / "v.log"
    path.write_text(f"2026-07-27T10:11:12Z stdout F {ROUTES}\n{STARTUP}\n")
    before = rejects("file", "bad_cri")
    records = list(read_file(str(path), fmt="cri", stream="inference/vllm-0/vllm"))
    assert [(r.stream, r.text) for r in records] == [("inference/vllm-0/vllm", ROUTES)]
    assert rejects("file", "bad_cri") == before + 1


def test_unreadable_files_are_counted_and_skipped(tmp_path):
    good = tmp_path / "good.log"
    good.write_text(ROUTES + "\n")
    truncated = tmp_path / "trunc.gz"
    truncated.write_bytes(gzip.compress(VLLM_LOG.encode() * 50)[:-30])
    before = rejects("file", "unreadable")
    records = list(read_files([str(tmp_path / "missing.log"), str(truncated), str(good)]))
    assert records[-1].text == ROUTES
    assert rejects("file", "unreadable") == before + 2


def test_lines_in_counts_emitted_records(tmp_path):
    path = tmp_path / "v.log"
    path.write_text(VLLM_LOG * 1000)
    before = lines_in("file")
    assert len(list(read_file(str(path)))) == 5000
    assert lines_in("file") == before + 5000


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=3000), st.booleans())
def test_any_bytes_are_read_without_exception(tmp_path, data, compress):
    path = tmp_path / "junk.log"
    path.write_bytes(gzip.compress(data) if compress else data)
    for rec in read_file(str(path), max_line=500):
        rec.text.encode("utf-8")
        assert "\n" not in rec.text and len(rec.text) <= 500


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(min_size=1, max_size=2000))
def test_random_binary_lines_are_rejected_not_read(tmp_path, data):
    path = tmp_path / "blob.bin"
    blob = os.urandom(4096) + data
    path.write_bytes(blob)
    records = list(read_file(str(path)))
    # Random bytes are almost all junk; whatever survives is valid text.
    assert sum(len(r.text) for r in records) < len(blob) / 2


REAL = Path(__file__).parent / "fixtures" / "real"


@pytest.mark.parametrize(
    "cri_path", sorted(REAL.glob("*.cri.log")), ids=lambda p: p.name.removesuffix(".cri.log")
)
def test_real_vllm_cri_captures_decode_to_the_plain_log(cri_path):
    base = cri_path.name.removesuffix(".cri.log")
    attempt = None
    if (stem_n := base.rsplit(".", 1))[-1].isdigit() and len(stem_n) == 2:
        base, attempt = stem_n[0], int(stem_n[1])  # <name>.<n>.cri.log: attempt n+1 of a loop
    meta = json.loads((REAL / f"{base}.meta.json").read_text())
    plain = (REAL / f"{base}.log").read_bytes().decode("utf-8", "replace").split("\n")
    if plain[-1] == "":
        plain.pop()
    if attempt is not None:  # the plain log holds every attempt, appended
        before = sum(a["lines"] for a in meta["attempts"][:attempt])
        meta = meta["attempts"][attempt]
        plain = plain[before : before + meta["lines"]]
    records = list(read_file(str(cri_path)))
    assert [r.text for r in records] == plain  # \r, ANSI and tqdm bars untouched
    assert len(records) == meta["lines"]
    if attempt is None:
        assert sum(r.meta["fd"] == "stdout" for r in records) == meta["stdout_lines"]
        assert sum(r.meta["fd"] == "stderr" for r in records) == meta["stderr_lines"]
    times = [r.time for r in records]
    assert times == sorted(times)
    start = parse_rfc3339(meta["started"])
    end = parse_rfc3339(meta["ended"])
    assert start <= times[0] and times[-1] <= end


text_lines = st.lists(
    st.tuples(
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=10, max_size=120),
        st.sampled_from([b"", b"\xff", b"caf\xe9", b"\xc3"]),  # none, or one bad sequence
        st.integers(0, 3000),  # extra length: some lines go over the limit
    ),
    max_size=30,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text_lines)
def test_every_bad_line_is_counted_exactly_once(tmp_path, lines):
    max_line = 1000
    path = tmp_path / "mixed.log"
    raws = [b"x" * extra + text.encode() + bad for text, bad, extra in lines]
    path.write_bytes(b"".join(r + b"\n" for r in raws))
    oversize, invalid = rejects("file", "oversize"), rejects("file", "invalid_utf8")
    records = list(read_file(str(path), max_line=max_line, fmt="raw"))
    # bad lines are kept, never dropped; over-long ones are cut (before their bad bytes)
    assert [r.text for r in records] == [
        raw.decode(errors="replace") if len(raw) <= max_line else raw[:max_line].decode()
        for raw in raws
    ]
    assert rejects("file", "oversize") == oversize + sum(len(r) > max_line for r in raws)
    assert rejects("file", "invalid_utf8") == invalid + sum(
        len(raw) <= max_line and bad != b"" for raw, (_, bad, _) in zip(raws, lines, strict=True)
    )
