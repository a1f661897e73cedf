"""A wheel that works (#10): build the wheel from the files the Docker image is built from,
install it (not editable) into a fresh virtual environment, and classify a real log with it
from a directory outside the tree: rules and the pinned text model come from the data the
wheel ships (``vllm_sentinel_data.rules`` / ``.models``, read with importlib.resources), and
inference runs without scikit-learn (the [train] extra).

The fresh venv gets the wheel alone (``--no-deps``); its dependencies are this interpreter's
site-packages, added by a ``.pth`` file after the install, so the test needs no download
beyond the build backend (setuptools, fetched by pip's isolated build as in the image)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
KV = ROOT / "tests" / "fixtures" / "real" / "kv-cache-too-small.log"
# What the image's build context holds (.dockerignore): the sources of the wheel.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "service", "rules", "models")


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    # -v: the build backend's own output (pip hides it otherwise), for the warnings check
    out = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(dist), str(src)])
    assert out.returncode == 0, out.stdout + out.stderr
    (dist / "build.log").write_text(out.stdout + out.stderr)
    (whl,) = dist.glob("vllm_sentinel-*.whl")
    return whl


def test_the_build_prints_no_deprecation_and_names_the_license(wheel: Path) -> None:
    """Every install printed setuptools' ``project.license`` table deprecation twice (#22)."""
    log = (wheel.parent / "build.log").read_text()
    assert "SetuptoolsDeprecationWarning" not in log, log[-3000:]
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(zf.read(meta).decode())
    assert headers["License-Expression"] == "Apache-2.0"


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its bin directory."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    out = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ]
    )
    assert out.returncode == 0, out.stdout + out.stderr
    site = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        ).stdout.strip()
    )
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "zz_dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    return env_dir / "bin"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["NO_COLOR"] = "1"
    return env


def test_the_wheel_ships_rules_models_and_templates(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []
    for sub, pattern in (
        ("rules", "*.yaml"),
        ("rules/signatures", "*.yaml"),
        ("models", "text_model.*"),
    ):
        shipped = {p.name for p in (ROOT / sub).glob(pattern)}
        assert shipped, sub
        assert {f"vllm_sentinel_data/{sub}/{n}" for n in shipped} <= names, sub
    assert {
        f"service/ui/templates/{p.name}" for p in (ROOT / "service/ui/templates").glob("*")
    } <= names
    assert not any(n.startswith(("tests/", "rules/", "models/", "training_data/")) for n in names)
    runtime = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("numpy") for r in runtime)
    assert not any(r.startswith(("scikit-learn", "skops")) for r in runtime), runtime
    assert any(r.startswith("scikit-learn") and 'extra == "train"' in r for r in requires)


def test_the_installed_wheel_classifies_a_real_log_with_the_model(
    installed: Path, tmp_path: Path
) -> None:
    out = _run(
        [str(installed / "vllm-sentinel"), "-v", "classify", "--json", str(KV)],
        cwd=tmp_path,
        env=_env(),
    )
    assert out.returncode == 1, out.stderr  # 1: a critical incident
    (report,) = [json.loads(line) for line in out.stdout.splitlines()]
    crit = [i for i in report["incidents"] if i["severity"] == "critical"]
    assert crit[0]["category"] == "oom_kv_cache", crit
    assert "signatures only" not in out.stderr and "refused" not in out.stderr, out.stderr


PROBE = """
import json, sys
sys.modules["sklearn"] = None  # inference must not need the [train] extra
import service, vllm_sentinel_data.rules
from service import metrics
from service.classify.loader import MODELS_DIR, build_classifier
from service.offline.report import classify_paths
from service.classify.rules import RULES_DIR
from service.training.evaluate import macro_f1

clf = build_classifier()
(rep,) = classify_paths([sys.argv[1]], clf)
print(json.dumps({
    "service": service.__file__, "rules": str(RULES_DIR), "models": str(MODELS_DIR),
    "model": clf.model is not None, "loaded": metrics.MODEL_LOADED._value.get(),
    "categories": [i["category"] for i in rep["incidents"] if i["severity"] == "critical"],
}))
"""


def test_the_installed_wheel_reads_its_own_data_without_scikit_learn(
    installed: Path, tmp_path: Path
) -> None:
    out = _run([str(installed / "python"), "-c", PROBE, str(KV)], cwd=tmp_path, env=_env())
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    venv_dir = str(installed.parent)
    for key in ("service", "rules", "models"):
        assert got[key].startswith(venv_dir), (key, got[key])  # not the source tree
        assert not got[key].startswith(str(ROOT)), (key, got[key])
    assert got["model"] and got["loaded"] == 1.0
    assert got["categories"][0] == "oom_kv_cache"


def test_train_without_the_extra_says_so_in_one_line(installed: Path, tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "from service.cli import main; sys.exit(main(['train']))"
    )
    out = _run([str(installed / "python"), "-c", code], cwd=tmp_path, env=_env())
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'vllm-sentinel[train]'" in lines[0], out.stderr
