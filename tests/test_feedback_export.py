"""``vllm-sentinel feedback-export`` end to end on SQLite: real logs through the pipeline into a
store, feedback through the API, the export as a subprocess of the CLI, and
``vllm-sentinel train --with-feedback`` on the file it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from service import cli
from service.api.app import create_app
from service.config import ApiSettings, Settings, StoreSettings
from service.context import ServiceContext
from service.records import LogRecord
from service.store import Store
from service.training.examples import load_examples
from service.training.feedback import corrections, training_text
from tests.test_store import REAL, _rulebook, k8s, kafka_records, pipeline

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "training_data"
TOKEN = "feedback-token-0123456789"
DRIVER_LINE = (
    "(EngineCore_DP0 pid=68) ERROR 07-27 10:00:05 [core.py:708] RuntimeError: The "
    "NVIDIA driver on your system is too old (found version 12090)."
)


def _store_with_incidents(db: Path) -> tuple[Store, dict[str, str]]:
    store = Store(f"sqlite:///{db}")
    store.migrate()
    p = pipeline(store)
    for i, (pod, log) in enumerate(
        [
            ("kv", REAL / "kv-cache-too-small.cri.log"),
            ("dtype", REAL / "bad-dtype.cri.log"),
            ("port", REAL / "port-in-use.cri.log"),
        ]
    ):
        p.process(
            kafka_records(log, stream=f"ml/{pod}/vllm", partition=i, meta=k8s("ml", pod)), "kafka"
        )
    p.process(
        [
            LogRecord("ml/drv/vllm", line, meta=k8s("ml", "drv"))
            for line in (
                "| NVIDIA-SMI 575.57.08    Driver Version: 575.57.08      CUDA Version: 12.9     |",
                DRIVER_LINE,
            )
        ],
        "http",
    )
    by_pod = {x["pod"]: x["id"] for x in store.list_incidents(limit=100)[0]}
    assert set(by_pod) == {"kv", "dtype", "port", "drv"}
    return store, by_pod


def _tiny_training_set(tmp_path: Path) -> Path:
    """A few real examples of every category (the procedure is under test, not quality)."""
    data = tmp_path / "data"
    data.mkdir()
    picked: dict[str, list[str]] = {}
    for name in ("real.jsonl", "generated.jsonl"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if len(picked.setdefault(row["category"], [])) < 12:
                    picked[row["category"]].append(line)
    (data / "tiny.jsonl").write_text("\n".join(x for rows in picked.values() for x in rows) + "\n")
    (data / "ood.jsonl").write_text(
        json.dumps({"text": "KeyError: 'user_id'", "category": "unknown", "family": "o1"}) + "\n"
    )
    return data


def test_feedback_export_feeds_training(tmp_path: Path) -> None:
    db = tmp_path / "sentinel.db"
    store, ids = _store_with_incidents(db)
    incident = {pod: store.get_incident(i) for pod, i in ids.items()}
    assert incident["drv"]["category"] == "driver_incompatible"
    settings = Settings(api=ApiSettings(token=TOKEN), store=StoreSettings(url=f"sqlite:///{db}"))
    ctx = ServiceContext(
        settings=settings,
        store=store,
        pipeline=pipeline(store),
        rulebook=_rulebook(),
        text_model=None,
        ready=True,
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(ctx)) as api:

        def feedback(pod: str, **body: object) -> None:
            r = api.post(f"/incidents/{ids[pod]}/feedback", json=body, headers=auth)
            assert r.status_code == 201, r.text

        feedback("kv", correct=True)
        feedback("dtype", correct=False, category="model_unavailable", comment="was a typo")
        feedback("drv", correct=False, category="nccl_error")  # then changed their mind:
        feedback("drv", correct=True)  # the newest feedback on an incident wins
        feedback("port", correct=False)  # wrong, but no right answer given: nothing to learn
    store.close()

    config = tmp_path / "sentinel.yaml"
    config.write_text(yaml.safe_dump({"store": {"url": f"sqlite:///{db}"}}))
    out = tmp_path / "feedback.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "feedback-export",
            "--config",
            str(config),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "3 corrections written" in done.stderr and "1 older feedback" in done.stderr
    assert "1 no category" in done.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    by_id = {r["incident_id"]: r for r in rows}
    assert set(by_id) == {ids["kv"], ids["dtype"], ids["drv"]}
    assert by_id[ids["kv"]]["category"] == "oom_kv_cache" and by_id[ids["kv"]]["correct"]
    assert by_id[ids["dtype"]]["category"] == "model_unavailable"
    assert by_id[ids["drv"]] == {
        "text": "RuntimeError: The NVIDIA driver on your system is too old (found version 12090).",
        "category": "driver_incompatible",
        "incident_id": ids["drv"],
        "correct": True,
    }
    for pod in ("kv", "dtype"):  # the root-cause line without its vLLM header
        line = incident[pod]["line"]
        assert by_id[ids[pod]]["text"] == training_text(line) and line.endswith(
            by_id[ids[pod]]["text"]
        )
        assert "[" not in by_id[ids[pod]]["text"][:3]

    # the file is what train --with-feedback reads: same loader, then the real CLI
    data = _tiny_training_set(tmp_path)
    examples, _ = load_examples(data, out)
    assert sorted((e.text, e.category) for e in examples if e.source == "feedback") == sorted(
        (r["text"], r["category"]) for r in rows
    )
    models = tmp_path / "models"
    assert (
        cli.main(
            [
                "train",
                "--data",
                str(data),
                "--out",
                str(models),
                "--seed",
                "1",
                "--with-feedback",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    manifest = json.loads((models / "text_model.json").read_text())
    assert manifest["data"]["feedback"] == str(out)


def test_feedback_export_without_a_database_fails_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"store": {"url": f"sqlite:///{tmp_path / 'none.db'}"}}))
    assert (
        cli.main(["feedback-export", "--config", str(config), "--out", str(tmp_path / "x.jsonl")])
        == 2
    )
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "x.jsonl").exists()


def test_corrections_rules() -> None:
    rows = [  # newest first, as Store.list_feedback returns them
        {
            "incident_id": "a",
            "correct": False,
            "category": "oom_runtime",
            "incident_category": "oom_kv_cache",
            "line": "torch.OutOfMemoryError: CUDA out of memory",
        },
        {
            "incident_id": "a",
            "correct": True,
            "category": None,
            "incident_category": "oom_kv_cache",
            "line": "torch.OutOfMemoryError: CUDA out of memory",
        },
        {
            "incident_id": "b",
            "correct": False,
            "category": "unknown",
            "incident_category": "config_error",
            "line": "ERROR 07-27 10:00:05 [x.py:1] odd",
        },
        {
            "incident_id": "c",
            "correct": True,
            "category": None,
            "incident_category": "config_error",
            "line": "",
        },
    ]
    out, skipped = corrections(rows)
    assert [(r["incident_id"], r["category"], r["text"]) for r in out] == [
        ("b", "unknown", "odd"),
        ("a", "oom_runtime", "torch.OutOfMemoryError: CUDA out of memory"),
    ]
    assert skipped == {"older_feedback": 1, "no_category": 0, "no_line": 1, "unknown_category": 0}
