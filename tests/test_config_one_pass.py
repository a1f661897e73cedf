"""``vllm-sentinel check-config`` in one pass (issue #28): every problem the first time
(never "fix these four, run again, find five more"), stage names that are not stages refused
with the nearest one, and the settings file of the running service checked with ``--probe``
while it runs (its port is in use by itself: a note, not a problem)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from service.cli import main
from service.config import Settings
from service.configcheck import check_config, check_report, serve_problems
from tests.e2e_support import Sentinel, free_port, service_config
from tests.receiver import Receiver

BAD: dict[str, Any] = {
    "api": {"port": 70000, "max_connections": 20},
    "receivers": [
        {
            "name": "a",
            "type": "slack",
            "url_env": "SENTINEL_TEST_UNSET_URL",
            "timeout_s": "fast",
            "match": {"tier": ["capcity"]},
        },
        {"name": "b", "type": "pagerduty"},
    ],
    "store": {"url": "mysql://db/x"},
    "rules": {"dirs": ["/nonexistent/rules"]},
    "stall": {"deadlines_s": {"model_lod": 600}},
}
# each problem of BAD (a piece of its line) and the edit that fixes it
FIXES: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("api.port: Input should be less than or equal to 65535", lambda d: d["api"].pop("port")),
    (
        "api: max_connections must exceed max_requests_in_flight",
        lambda d: d["api"].pop("max_connections"),
    ),
    (
        "receivers[0] (a): url_env: environment variable SENTINEL_TEST_UNSET_URL is not set",
        lambda d: d["receivers"][0].update(url_env=None, url="https://hooks.slack.com/x"),
    ),
    (
        "receivers[0] (a).timeout_s: Input should be a valid number",
        lambda d: d["receivers"][0].pop("timeout_s"),
    ),
    (
        "receivers[0] (a): match.tier: 'capcity' is not a tier",
        lambda d: d["receivers"][0].pop("match"),
    ),
    (
        "receivers[1] (b).url: Field required",
        lambda d: d["receivers"][1].update(url="https://events.pagerduty.com/v2/enqueue"),
    ),
    (
        "receivers[1] (b): a pagerduty receiver needs routing_key",
        lambda d: d["receivers"][1].update(routing_key="r0uting"),
    ),
    ("store.url: mysql is not supported", lambda d: d.pop("store")),
    ("rules: /nonexistent/rules: not a directory", lambda d: d.pop("rules")),
    (
        "stall.deadlines_s.model_lod: not a stage (did you mean model_load?",
        lambda d: d["stall"]["deadlines_s"].update(
            model_load=d["stall"]["deadlines_s"].pop("model_lod")
        ),
    ),
]


def write(tmp_path: Path, data: object, name: str = "sentinel.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_problem_is_reported_the_first_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SENTINEL_TEST_UNSET_URL", raising=False)
    first = check_config(write(tmp_path, BAD))
    for piece, _ in FIXES:
        assert sum(piece in line for line in first) == 1, (piece, first)
    assert len(first) == len(FIXES)  # one line each, no echo (url_env's url is not "missing")
    # fixing what it said, in any prefix, never brings a problem it had not said
    for n in range(1, len(FIXES) + 1):
        data = copy.deepcopy(BAD)
        for _, fix in FIXES[:n]:
            fix(data)
        again = check_config(write(tmp_path, data, f"fixed-{n}.yaml"))
        assert set(again) <= set(first), (n, sorted(set(again) - set(first)))
        assert len(again) == len(FIXES) - n
    assert check_config(write(tmp_path, data, "fixed.yaml")) == []


def test_an_unknown_stage_name_is_refused_with_the_nearest_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"stall": {"deadlines_s": {"model_lod": 600, "cuda_init": 60}}})
    assert main(["check-config", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"{path}: stall.deadlines_s.model_lod: not a stage (did you mean model_load? one of: "
        "container, cuda_init, distributed_init, model_load, kv_cache_init, api_server, serving)"
    ]
    # serve refuses it too: a deadline nobody would ever apply
    settings = Settings(stall={"deadlines_s": {"warmup": 60}})
    assert [p for p in serve_problems(settings) if "warmup" in p] == [
        "stall.deadlines_s.warmup: not a stage (one of: container, cuda_init, "
        "distributed_init, model_load, kv_cache_init, api_server, serving)"
    ]


@pytest.mark.integration
def test_the_running_service_settings_check_clean_with_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    cfg = service_config(store_url=f"sqlite:///{tmp_path / 's.db'}", api_port=port)
    svc = Sentinel(tmp_path, "running", cfg)
    try:
        svc.start().wait_ready(60)
        report = check_report(svc.config_path, probe=True)
        assert report.problems == []
        assert len(report.notes) == 1
        assert report.notes[0].startswith(
            f"api: 127.0.0.1:{port} is in use by a running vllm-sentinel (instance "
        )
        assert main(["check-config", "--probe", str(svc.config_path)]) == 0
        out = capsys.readouterr().out
        assert f"note: api: 127.0.0.1:{port} is in use by a running vllm-sentinel" in out
        assert out.rstrip().endswith(": ok")
    finally:
        svc.close()


def test_a_port_taken_by_anything_else_is_still_a_problem(tmp_path: Path) -> None:
    with Receiver() as other:  # an HTTP server that is not vllm-sentinel
        port = urlsplit(other.url).port
        path = write(tmp_path, {"api": {"port": port}, "sources": {"forward": None}})
        report = check_report(path, probe=True)
    assert report.notes == []
    assert report.problems == [f"api: cannot listen on 127.0.0.1:{port}: Address already in use"]
