"""The trips a newcomer meets in the first hour (#22), each against the real service or the
real CLI: alert links on a non-default port, a plain-text ``/ingest`` with a kubelet-path
tag, ``check-config`` warnings about links nobody can open, the shipped Kubernetes config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.config import Settings
from service.configcheck import check_report
from tests.e2e_support import ROOT

CLI = [sys.executable, "-m", "service.cli"]


def test_external_url_defaults_to_the_api_address() -> None:
    assert Settings(api={"port": 9123}).notify.external_url == "http://127.0.0.1:9123"
    assert Settings(api={"host": "10.1.2.3", "port": 80}).notify.external_url == (
        "http://10.1.2.3:80"
    )
    given = Settings(api={"port": 9123}, notify={"external_url": "https://s.corp"})
    assert given.notify.external_url == "https://s.corp"


@pytest.mark.parametrize(
    "notify, warned",
    [
        ({}, "is loopback while the API listens on 0.0.0.0"),
        ({"external_url": "http://localhost:8080"}, "is loopback"),
        ({"external_url": "https://sentinel.example.com"}, "is a placeholder"),
        ({"external_url": "http://s.vllm-sentinel.svc.cluster.local:8080"}, "in-cluster DNS"),
        ({"external_url": "https://sentinel.corp.net"}, None),
    ],
)
def test_check_config_warns_about_links_nobody_can_open(
    tmp_path: Path, notify: dict[str, str], warned: str | None
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"api": {"host": "0.0.0.0", "token": "t"}, "notify": notify}))
    run = subprocess.run(
        [*CLI, "check-config", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr  # a warning, not a refusal
    if warned is None:
        assert run.stdout == f"{path}: ok\n"
    else:
        assert f"{path}: warning: notify.external_url: " in run.stdout
        assert warned in run.stdout
        assert run.stdout.endswith(f"{path}: ok (1 warning)\n")


def test_the_shipped_kubernetes_config_takes_ingest_and_flags_its_placeholder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_API__TOKEN", "from-the-secret")
    cm = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "configmap.yaml").read_text())
    path = tmp_path / "sentinel.yaml"
    path.write_text(cm["data"]["sentinel.yaml"])
    problems, warnings = check_report(path)
    assert problems == []
    assert Settings(**yaml.safe_load(path.read_text())).sources.http is True  # OTLP, /ingest
    assert len(warnings) == 1 and "placeholder" in warnings[0]
