"""Every shipped Kubernetes overlay renders (``kubectl kustomize``), every object passes the
Kubernetes schemas (``kubernetes-validate``, strict), and the pieces fit: the Ingress reaches
the Service, the Service the pods, alert links open through the Ingress, and each overlay's
``sentinel.yaml`` (with the Deployment's literal env) is a valid configuration that does what
docs/deploying.md says (single: SQLite on a claim, HTTP + forward; replicated: Kafka, PostgreSQL)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import kubernetes_validate
import pytest
import yaml

from service.config import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ["single", "replicated", "monitoring"]
K8S_VERSION = "1.32.0"
CRDS = {"monitoring.coreos.com/v1"}  # Prometheus Operator: not in the core schemas

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


def render(overlay: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(KUBE / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {len(found)}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    return containers[0]


def settings_of(docs: list[dict[str, Any]], tmp_path: Path) -> Settings:
    """The overlay's sentinel.yaml with the Deployment's literal (non-Secret) env applied."""
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(one(docs, "ConfigMap")["data"]["sentinel.yaml"])
    env = {e["name"]: e["value"] for e in container(docs)["env"] if "value" in e}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
        return load_settings(cfg)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_every_object_passes_the_schemas(overlay: str) -> None:
    docs = render(overlay)
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] != "Namespace"} == {
        "vllm-sentinel"
    }
    for doc in docs:
        if doc["apiVersion"] in CRDS:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_schema_check_bites() -> None:
    """A wrong type or an unknown field in a rendered object is refused."""
    dep = one(render("replicated"), "Deployment")
    bad = copy.deepcopy(dep)
    bad["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["envv"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ingress_service_and_pods_fit_and_alert_links_open_through_the_ingress(
    overlay: str, tmp_path: Path
) -> None:
    docs = render(overlay)
    ingress, service = one(docs, "Ingress"), one(docs, "Service")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"] for p in container(docs)["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    settings = settings_of(docs, tmp_path)
    assert settings.notify.external_url == f"https://{rule['host']}"
    assert settings.api.port == 8080 and settings.api.host == "0.0.0.0"


def test_single_is_one_sqlite_replica_on_a_claim_with_http_and_forward(tmp_path: Path) -> None:
    docs = render("single")
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    settings = settings_of(docs, tmp_path)
    assert settings.store.url.startswith("sqlite:////var/lib/vllm-sentinel/")
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["data"] == "/var/lib/vllm-sentinel"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert claim == one(docs, "PersistentVolumeClaim")["metadata"]["name"]
    assert settings.sources.http and settings.sources.kafka is None
    assert settings.sources.forward is not None and settings.sources.forward.host == "0.0.0.0"
    env = {e["name"]: e for e in container(docs)["env"]}
    key = env["SENTINEL_SOURCES__FORWARD__SHARED_KEY"]["valueFrom"]["secretKeyRef"]
    assert key["name"] == "vllm-sentinel"  # the forward port never opens without a key
    forward = [p for p in one(docs, "Service")["spec"]["ports"] if p["name"] == "forward"]
    assert forward and forward[0]["port"] == settings.sources.forward.port


def test_replicated_shares_kafka_and_postgresql(tmp_path: Path) -> None:
    docs = render("replicated")
    assert one(docs, "Deployment")["spec"]["replicas"] >= 2
    assert one(docs, "PodDisruptionBudget")
    env = {e["name"]: e for e in container(docs)["env"]}
    assert env["SENTINEL_STORE__URL"]["valueFrom"]["secretKeyRef"]["key"] == "store-url"
    settings = settings_of(docs, tmp_path)
    assert settings.sources.kafka is not None and settings.sources.kafka.group


def test_monitoring_adds_the_operator_objects_to_replicated() -> None:
    docs = render("monitoring")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [d["kind"] for d in render("replicated")] + ["PrometheusRule", "ServiceMonitor"]
    )
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_example_secret_has_every_key_the_overlay_needs(overlay: str) -> None:
    """Every Secret key an overlay reads (not marked optional) is in secret.example.yaml."""
    secret = yaml.safe_load((KUBE / "secret.example.yaml").read_text())
    have = set(secret["stringData"])
    needed = {
        e["valueFrom"]["secretKeyRef"]["key"]
        for e in container(render(overlay)).get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
        and not e["valueFrom"]["secretKeyRef"].get("optional")
    }
    assert needed <= have, needed - have


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_port_is_declared_only_where_it_is_served(overlay: str, tmp_path: Path) -> None:
    docs = render(overlay)
    settings = settings_of(docs, tmp_path)
    ports = {p["name"] for p in container(docs).get("ports", [])}
    assert ("forward" in ports) is (settings.sources.forward is not None), ports


def test_every_file_the_kubernetes_comments_name_exists() -> None:
    named = {
        m
        for f in KUBE.rglob("*.yaml")
        for m in re.findall(r"deploy/[A-Za-z0-9_./-]+\.(?:yaml|md|sh)", f.read_text())
    }
    assert named and not [m for m in named if not (ROOT / m).exists()]
