"""Weak credentials refused beyond loopback (#27): a token or shared key shorter than 16
random bytes, of low entropy, an ``<...>`` placeholder or a value the repository's own
examples show stops the service with a message naming the setting, and
``vllm-sentinel check-config`` says the same; on loopback it is only warned about."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from service.cli import main
from service.config import ApiSettings, ForwardSettings
from service.netguard import (
    EXAMPLE_VALUES,
    InsecureConfigError,
    check_auth_config,
    check_forward_config,
    weakness,
)

ROOT = Path(__file__).resolve().parents[1]
STRONG = (
    "3f9a1c2b7d4e6f8091a2b3c4d5e6f708",
    "kQ8vX2mP9rL4tW7zY1nB3c",
    "correct horse battery staple",
)


def example_values() -> list[str]:
    """Every token, key or password value the repository's examples and docs show."""
    secret = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "secret.example.yaml").read_text())
    values = [v for k, v in secret["stringData"].items() if k != "store-url"]
    text = "\n".join(
        p.read_text()
        for p in [
            ROOT / "README.md",
            ROOT / "SECURITY.md",
            *ROOT.glob("deploy/**/*.*"),
            *ROOT.glob("docs/*.md"),
        ]
        if p.suffix in (".md", ".yaml", ".conf", ".yml")
    )
    values += re.findall(r"(?:TOKEN|SHARED_KEY)=[\"']?([^\s\"'$]+)", text)
    values += re.findall(
        r"(?:token|shared_key|api-token|forward-shared-key):\s*[\"']([^\"']+)[\"']", text
    )
    return [v for v in values if v not in ("null", "")]


def test_every_value_the_examples_show_is_refused() -> None:
    values = example_values()
    assert "<32+ random bytes, hex>" in values and len(values) >= 3
    assert {v: weakness(v) for v in values if weakness(v) is None} == {}


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "t0ken",
        "0123456789abcdef",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "abababababababababababababababab",
        "<32+ random bytes, hex>",
        *sorted(EXAMPLE_VALUES),
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ],
)
def test_weak_values_are_named_weak(value: str) -> None:
    assert weakness(value) is not None


@pytest.mark.parametrize("value", STRONG)
def test_random_values_pass(value: str) -> None:
    assert weakness(value) is None


def test_beyond_loopback_the_service_refuses_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(InsecureConfigError, match=r"^api\.token is too short"):
        check_auth_config(ApiSettings(host="0.0.0.0", token="a"))
    with pytest.raises(InsecureConfigError, match=r"^api\.read_token is a placeholder"):
        check_auth_config(ApiSettings(host="0.0.0.0", token=STRONG[0], read_token="<token>"))
    with pytest.raises(InsecureConfigError, match=r"^sources\.forward\.shared_key has low entropy"):
        check_forward_config(ForwardSettings(host="0.0.0.0", shared_key="ab" * 20))
    check_auth_config(ApiSettings(host="0.0.0.0", token=STRONG[1]))
    check_auth_config(ApiSettings(host="127.0.0.1", token="a"))  # loopback: a warning
    assert "api.token is too short" in caplog.text


def test_serve_and_check_config_refuse_the_example_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.app import serve

    monkeypatch.setenv("SENTINEL_API__TOKEN", "<32+ random bytes, hex>")
    db = tmp_path / "never.db"
    config = tmp_path / "sentinel.yaml"
    config.write_text(
        yaml.safe_dump({"api": {"host": "0.0.0.0"}, "store": {"url": f"sqlite:///{db}"}})
    )
    with pytest.raises(InsecureConfigError, match="api.token is a placeholder"):
        serve(str(config))
    assert not db.exists()
    assert main(["check-config", str(config)]) == 1
    out = capsys.readouterr()
    assert "api.token is a placeholder" in out.out + out.err
    assert "<32+" not in out.out + out.err  # the value itself is never shown
