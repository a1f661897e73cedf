"""Run the real Prometheus, Alertmanager and promtool (Debian's ``prometheus`` and
``prometheus-alertmanager`` packages; ``.ci/run`` installs them) for the tests of the
service's Prometheus and Alertmanager doors.

A test that needs one of them is skipped, with the package to install named, only when
its binary is not on this machine; anything else that goes wrong fails.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e_support import free_port, wait_until

# binary → (other names it goes by, the Debian package that installs it)
BINARIES = {
    "prometheus": ((), "prometheus"),
    "promtool": ((), "prometheus"),
    "prometheus-alertmanager": (("alertmanager",), "prometheus-alertmanager"),
}


def binary(name: str) -> str:
    """Path of ``name``; the test is skipped (with the reason) when it is not installed."""
    aliases, package = BINARIES[name]
    for candidate in (name, *aliases):
        found = shutil.which(candidate) or shutil.which(candidate, path="/usr/bin:/usr/sbin")
        if found:
            return found
    pytest.skip(f"{name} is not installed (apt-get install {package}; .ci/run installs it)")
    raise AssertionError("unreachable")


def version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    return (out.stdout or out.stderr).splitlines()[0].strip()


class Server:
    """One server process on a free local port, its log in ``workdir``."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.url, timeout=10.0)

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> Server:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                return self.http.get("/-/ready", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout, f"{self.name} to be ready", interval=0.1)
        return self

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.http.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Alertmanager(Server):
    """``prometheus-alertmanager`` with one route to a webhook receiver (``hook_url``),
    grouped by incident, fast group timers; clustering off; storage in ``workdir``."""

    name = "alertmanager"

    def __init__(self, workdir: Path, hook_url: str) -> None:
        super().__init__(workdir)
        self.bin = binary("prometheus-alertmanager")
        self.config_path = workdir / "alertmanager.yml"
        self.config_path.write_text(
            yaml.safe_dump(
                {
                    "route": {
                        "receiver": "hook",
                        "group_by": ["incident"],
                        "group_wait": "1s",
                        "group_interval": "1s",
                        "repeat_interval": "1h",
                    },
                    "receivers": [
                        {
                            "name": "hook",
                            "webhook_configs": [{"url": hook_url, "send_resolved": True}],
                        }
                    ],
                }
            )
        )

    def command(self) -> list[str]:
        storage = self.workdir / "am-data"
        storage.mkdir(exist_ok=True)
        return [
            self.bin,
            f"--config.file={self.config_path}",
            f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=info",
        ]

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` (active, silenced and inhibited; not resolved), keeping those
        whose labels include ``filters``."""
        r = self.http.get("/api/v2/alerts")
        r.raise_for_status()
        return [a for a in r.json() if all(a["labels"].get(k) == v for k, v in filters.items())]


class Prometheus(Server):
    """``prometheus`` scraping ``targets`` (host:port) every second as job ``job``,
    evaluating ``rule_files`` every second; TSDB in ``workdir``."""

    name = "prometheus"

    def __init__(
        self,
        workdir: Path,
        targets: list[str],
        *,
        job: str = "vllm-sentinel",
        rule_files: list[Path] = (),
    ) -> None:
        super().__init__(workdir)
        self.bin = binary("prometheus")
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(p) for p in rule_files],
                    "scrape_configs": [
                        {
                            "job_name": job,
                            "metrics_path": "/metrics",
                            "static_configs": [{"targets": list(targets)}],
                        }
                    ],
                }
            )
        )

    def command(self) -> list[str]:
        storage = self.workdir / "prom-data"
        storage.mkdir(exist_ok=True)
        return [
            self.bin,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info",
        ]

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = self.http.get("/api/v1/query", params={"query": expr})
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def targets(self) -> list[dict[str, Any]]:
        r = self.http.get("/api/v1/targets")
        r.raise_for_status()
        return r.json()["data"]["activeTargets"]

    def rules(self) -> list[dict[str, Any]]:
        r = self.http.get("/api/v1/rules")
        r.raise_for_status()
        return [rule for g in r.json()["data"]["groups"] for rule in g["rules"]]


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """:func:`wait_until` that tolerates HTTP errors while a server warms up."""

    def attempt() -> Any:
        with contextlib.suppress(httpx.HTTPError):
            return predicate()
        return None

    return wait_until(attempt, timeout, what, interval)


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))
