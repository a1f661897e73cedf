"""The trips a newcomer meets in the first hour (#22), each against the real service or the
real CLI: alert links on a non-default port, a plain-text ``/ingest`` with a kubelet-path
tag, ``check-config`` warnings about links nobody can open, the shipped Kubernetes config."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from service.cli import main
from service.config import Settings
from service.configcheck import check_report
from tests.e2e_support import ROOT, Sentinel, free_port, service_config, wait_until, webhook
from tests.receiver import Receiver


def readme_curl() -> tuple[Path, str]:
    """The log file and the tag of the README's ``curl`` example for ``/ingest``."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"--data-binary @(\S+) \\\n\s+'http://127.0.0.1:8080/ingest\?tag=([^']+)'", text)
    assert m, "the README shows a curl example for /ingest"
    return ROOT / m.group(1), m.group(2)


CLI = [sys.executable, "-m", "service.cli"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


@pytest.mark.slow  # a real service
def test_plain_text_ingest_decodes_the_tag_and_the_alert_link_uses_api_port(
    tmp_path: Path, receiver: Receiver
) -> None:
    port = free_port()
    cfg = service_config(
        store_url=f"sqlite:///{tmp_path / 's.db'}", api_port=port, receivers=[webhook(receiver.url)]
    )
    del cfg["notify"]["external_url"]  # unset: from api.host and api.port
    s = Sentinel(tmp_path, "one", cfg).start()
    try:
        s.wait_ready()
        log, tag = readme_curl()
        r = s.http.post(
            "/ingest",
            params={"tag": tag},
            content=log.read_bytes(),
            headers={"Content-Type": "text/plain"},
        )
        assert r.status_code == 200, r.text
        assert receiver.wait_for(1, timeout=30), s.log_tail()
        incident = receiver.accepted()[0].json()["incident"]
        assert (incident["namespace"], incident["pod"]) == ("team-a", "llama-0")
        assert incident["url"].startswith(f"http://127.0.0.1:{port}/"), incident["url"]
        (stored,) = wait_until(s.incidents, 10, "the incident")
        assert stored["namespace"] == "team-a" and stored["pod"] == "llama-0"
    finally:
        s.close()


@pytest.mark.slow  # a real service
def test_serve_says_when_alert_links_will_only_open_on_this_machine(tmp_path: Path) -> None:
    cfg = service_config(store_url=f"sqlite:///{tmp_path / 's.db'}", api_port=free_port())
    cfg["api"].update(host="0.0.0.0", token="kQ8vX2mP9rL4tW7zY1nB3cD5")
    del cfg["notify"]["external_url"]
    s = Sentinel(tmp_path, "open", cfg).start()
    try:
        s.wait_ready()
        assert "notify.external_url: http://127.0.0.1:" in s.log_tail()
        assert "alert links will only open on this machine" in s.log_tail()
    finally:
        s.close()


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
    tmp_path: Path,
    notify: dict[str, str],
    warned: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first case in the real process, the others through the same entry point."""
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {"api": {"host": "0.0.0.0", "token": "kQ8vX2mP9rL4tW7zY1nB3cD5"}, "notify": notify}
        )
    )
    if not notify:
        run = subprocess.run(
            [*CLI, "check-config", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        code, out = run.returncode, run.stdout
    else:
        code, out = main(["check-config", str(path)]), capsys.readouterr().out
    assert code == 0, out  # a warning, not a refusal
    if warned is None:
        assert out == f"{path}: ok\n"
    else:
        assert f"{path}: warning: notify.external_url: " in out
        assert warned in out
        assert out.endswith(f"{path}: ok (1 warning)\n")


def test_the_single_instance_config_takes_ingest_and_flags_its_placeholder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's OTLP and curl examples need ``sources.http``; the shipped alert-link
    address is a placeholder the user must replace, and check-config says so."""
    monkeypatch.setenv("SENTINEL_API__TOKEN", "from-the-secret-kQ8vX2mP9rL4tW7zY1nB3cD5")
    monkeypatch.setenv(
        "SENTINEL_SOURCES__FORWARD__SHARED_KEY", "from-the-secret-kQ8vX2mP9rL4tW7zY1nB3cD5"
    )
    overlay = ROOT / "deploy" / "kubernetes" / "overlays" / "single" / "configmap.yaml"
    path = tmp_path / "sentinel.yaml"
    path.write_text(yaml.safe_load(overlay.read_text())["data"]["sentinel.yaml"])
    report = check_report(path)
    problems, warnings = report.problems, report.warnings
    assert problems == []
    assert Settings(**yaml.safe_load(path.read_text())).sources.http is True  # OTLP, /ingest
    assert len(warnings) == 1 and "placeholder" in warnings[0]
