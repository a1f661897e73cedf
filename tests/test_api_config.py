"""API start-up policy (no open API beyond loopback unless allowed), time and duration
parsing, and the deployment files staying in step with the settings and the API."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from service.api import create_app
from service.api.timespec import parse_duration, parse_instant
from service.config import ApiSettings, Settings, load_settings
from service.context import ServiceContext
from service.netguard import ALLOW_ENV, InsecureConfigError, check_auth_config, is_loopback

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


# ---- start-up policy ---------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.53", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "sentinel.example.com", ""])
def test_non_loopback_hosts(host: str) -> None:
    assert not is_loopback(host)


def test_no_token_beyond_loopback_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    api = ApiSettings(host="0.0.0.0")
    with pytest.raises(InsecureConfigError, match="SENTINEL_API__TOKEN"):
        check_auth_config(api)
    ctx = ServiceContext(Settings(api=api), None, None, None, None)
    with pytest.raises(InsecureConfigError):
        create_app(ctx)


def test_running_open_can_be_allowed_explicitly_and_is_loud(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ALLOW_ENV, "1")
    with caplog.at_level(logging.WARNING, logger="vllm_sentinel.api"):
        check_auth_config(ApiSettings(host="0.0.0.0"))
    assert "NO AUTHENTICATION" in caplog.text


def test_a_token_or_loopback_starts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    check_auth_config(ApiSettings(host="0.0.0.0", token="kQ8vX2mP9rL4tW7zY1nB3cD5"))
    with caplog.at_level(logging.WARNING, logger="vllm_sentinel.api"):
        check_auth_config(ApiSettings(host="127.0.0.1"))
    assert "unauthenticated" in caplog.text


# ---- times -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "epoch"),
    [
        (1785146472, 1785146472.0),
        ("1785146472.5", 1785146472.5),
        ("2026-07-27T10:01:12Z", 1785146472.0),
        ("2026-07-27T10:01:12.123456789Z", 1785146472.123456),
        ("2026-07-27T12:01:12+02:00", 1785146472.0),
        ("2026-07-27T10:01:12", 1785146472.0),
        ("2026-07-27", 1785110400.0),
    ],
)
def test_instants(value: Any, epoch: float) -> None:
    assert parse_instant(value) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize("value", ["yesterday", "nan", "-5", "inf", True, "2026-13-01"])
def test_bad_instants(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_instant(value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 604800),
        ("1h30m", 5400),
        ("1d12h", 129600),
        ("1.5h", 5400),
        ("600", 600),
        ("500ms", 0.5),
        ("2H", 7200),
        ("1h 30m", 5400),
    ],
)
def test_durations(value: str, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", ["", "forever", "2x", "h", "-1h", "0", "0s", "1h-30m", "1hx", "x1h"]
)
def test_bad_durations(value: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


# ---- deployment files --------------------------------------------------------------------
def _setting_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, field in model.model_fields.items():
        out.append(prefix + name)
        ann = field.annotation
        for candidate in getattr(ann, "__args__", None) or (ann,):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                out += _setting_paths(candidate, prefix + name + ".")
            for inner in getattr(candidate, "__args__", ()) or ():
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    out += _setting_paths(inner, prefix + name + ".")
    return out


def test_the_example_settings_file_loads_and_names_every_setting() -> None:
    path = DEPLOY / "sentinel.example.yaml"
    settings = load_settings(path)
    assert settings == Settings()  # the example shows the defaults
    text = path.read_text(encoding="utf-8")
    keys = set(re.findall(r"^[#\s-]*([a-z_]+):", text, flags=re.M))
    missing = [p for p in _setting_paths(Settings) if p.rsplit(".", 1)[-1] not in keys]
    assert not missing, f"not documented in sentinel.example.yaml: {missing}"


def test_the_kubernetes_config_map_is_valid_settings() -> None:
    cm = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "configmap.yaml").read_text())
    s = Settings(**yaml.safe_load(cm["data"]["sentinel.yaml"]))
    assert s.sources.kafka is not None and s.sources.kafka.group
    assert s.api.host == "0.0.0.0"
    assert s.sources.forward is None and s.sources.http is False


def test_the_deployment_runs_replicas_safely() -> None:
    dep = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "deployment.yaml").read_text())
    assert dep["spec"]["replicas"] == 3
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    env = {e["name"]: e for e in c["env"]}
    for name, key in (("SENTINEL_API__TOKEN", "api-token"), ("SENTINEL_STORE__URL", "store-url")):
        assert env[name]["valueFrom"]["secretKeyRef"]["key"] == key
    assert c["args"] == ["--config", "/etc/vllm-sentinel/sentinel.yaml"]
    pdb = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "pdb.yaml").read_text())
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]


def test_the_dockerfile_is_slim_non_root_and_probes_healthz() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?$", text, flags=re.M)
    base = "python:3.11.7-slim-bookworm"  # an exact release (tests/test_dockerfile.py)
    assert stages == [(base, "wheel"), (base, "")]
    assert "COPY --from=wheel /dist" in text and "pip install -e" not in text
    assert "USER 10001" in text and "EXPOSE 8080 24224" in text
    assert "/healthz" in text and "curl" not in text.split("HEALTHCHECK", 1)[1]
    assert 'ENTRYPOINT ["vllm-sentinel", "serve"]' in text


def test_fluent_bit_keys_by_pod_and_partitions_like_kafka_python() -> None:
    text = (DEPLOY / "fluent-bit.conf").read_text()
    active = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert re.search(r"multiline\.parser\s+docker, cri", active)
    assert re.search(r"Path\s+/var/log/containers/\*vllm\*\.log", active)
    assert re.search(r"Message_Key_Field\s+sentinel_key", active)
    assert re.search(r"rdkafka\.partitioner\s+murmur2_random", active)
    assert 'record["sentinel_key"] = k["namespace_name"] .. "/" .. k["pod_name"]' in active
    assert "Require_ack_response  True" in text and "Shared_Key" in text
