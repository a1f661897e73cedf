"""Settings you can check and keep secret: ``vllm-sentinel check-config`` (one line per
problem), ``X_env`` / ``X_file`` for every setting (receiver URLs, secrets, routing keys),
config errors as one line for every command (serve too), ``--version``, ``--help``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service import __version__
from service.cli import _parser, main
from service.config import ReceiverSettings, Settings
from service.configcheck import ConfigError, check_config, load_checked

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def write(tmp_path: Path, data: object, name: str = "sentinel.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- secrets from the environment or a file -------------------------------------------------
def test_every_receiver_secret_url_and_key_can_come_from_env_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_URL", "https://hooks.slack.com/services/T0/B0/x")
    (tmp_path / "pd-key").write_text("0123456789abcdef0123456789abcdef\n")
    (tmp_path / "hook-secret").write_text("s3cret")
    monkeypatch.setenv("HOOK_URL", "https://hooks.example.internal/sentinel")
    s = load_checked(
        write(
            tmp_path,
            {
                "receivers": [
                    {"name": "slack", "type": "slack", "url_env": "SLACK_URL"},
                    {
                        "name": "pd",
                        "type": "pagerduty",
                        "url": "https://events.pagerduty.com/v2/enqueue",
                        "routing_key_file": str(tmp_path / "pd-key"),
                    },
                    {
                        "name": "hook",
                        "type": "webhook",
                        "url_env": "HOOK_URL",
                        "secret_file": str(tmp_path / "hook-secret"),
                    },
                ]
            },
        )
    )
    slack, pd, hook = s.receivers
    assert slack.url == "https://hooks.slack.com/services/T0/B0/x"
    assert pd.routing_key == "0123456789abcdef0123456789abcdef"  # trailing newline dropped
    assert (hook.url, hook.secret) == ("https://hooks.example.internal/sentinel", "s3cret")


def test_the_convention_holds_for_every_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("t0ken-from-a-secret\n")
    monkeypatch.setenv("DB_URL", f"sqlite:///{tmp_path / 'x.db'}")
    s = Settings(
        api={"token_file": str(tmp_path / "token")},
        store={"url_env": "DB_URL"},
        sources={"forward": {"shared_key_env": "DB_URL"}},
    )
    assert s.api.token == "t0ken-from-a-secret"
    assert s.store.url.endswith("x.db") and s.sources.forward.shared_key == s.store.url


def test_indirect_values_fail_with_a_line_that_never_shows_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOPE", raising=False)
    monkeypatch.setenv("PD_KEY", "super-secret-key")
    problems = check_config(
        write(
            tmp_path,
            {
                "receivers": [
                    {"name": "a", "type": "slack", "url_env": "NOPE"},
                    {"name": "b", "type": "slack", "url_file": str(tmp_path / "missing")},
                    {
                        "name": "c",
                        "type": "pagerduty",
                        "url": "https://x.example",
                        "routing_key": "k",
                        "routing_key_env": "PD_KEY",
                    },
                    {
                        "name": "d",
                        "type": "pagerduty",
                        "url": "https://x.example",
                        "routing_key_env": "PD_KEY",
                        "timeout_s": "fast",
                    },
                ]
            },
        )
    )
    assert problems == [
        "receivers[0] (a): url_env: environment variable NOPE is not set",
        f"receivers[1] (b): url_file: cannot read {tmp_path / 'missing'}: "
        "No such file or directory",
        "receivers[2] (c): give routing_key or routing_key_env, not both",
        "receivers[3] (d).timeout_s: Input should be a valid number, unable to parse string "
        "as a number",
    ]
    assert not any("super-secret-key" in p for p in problems)


# ---- check-config ----------------------------------------------------------------------------
BAD = {
    "api": {"host": "127.0.0.1", "port": 8080},
    "sources": {"forward": {"port": 8080}, "kafka": {"bootstrap": "kafka:9092,broken"}},
    "store": {"url": "mysql://db/x"},
    "receivers": [
        {
            "name": "pd",
            "type": "pagerduty",
            "url": "https://events.pagerduty.com/v2/enqueue",
            "match": {
                "tier": ["capcity"],
                "category": ["oom_*", "gpu_lost"],
                "stage": ["serving"],
                "flavour": ["x"],
                "namespace": ["prod-*"],
            },
        },
        {"name": "pd", "type": "slack", "url": "ftp://hooks.example/x"},
        {"name": "hook", "type": "webhook", "url": "http://hooks.example:99999/x"},
    ],
    "rules": {"dirs": ["/nonexistent/rules"], "disabled": ["no-such-rule"]},
}


def test_check_config_lists_every_problem_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write(tmp_path, BAD)
    code, out, err = run("check-config", str(path), capsys=capsys)
    assert code == 1
    lines = out.splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    body = "\n".join(line.split(": ", 1)[1] for line in lines)
    for expected in (
        "receivers[0] (pd): a pagerduty receiver needs routing_key (or routing_key_env / "
        "routing_key_file)",
        "receivers[0] (pd): match.tier: 'capcity' is not a tier",
        "receivers[0] (pd): match.category: 'gpu_lost' is not a category",
        "receivers[0] (pd): match: unknown matcher field 'flavour'",
        "receivers[1] (pd): another receiver has the name 'pd'",
        "receivers[1] (pd): url must be an http:// or https:// URL with a host",
        "receivers[2] (hook): url has an invalid port",
        "sources.forward.port: 8080 is also api.port",
        "sources.kafka.bootstrap: 'broken' is not host:port",
        "store.url: mysql is not supported (sqlite or postgresql)",
        "rules: /nonexistent/rules: not a directory",
        "rules: disabled: no rule with id 'no-such-rule'",
    ):
        assert expected in body, expected
    assert "oom_*" not in body and "prod-*" not in body and "serving" not in body
    assert len(lines) == 12
    assert err.strip() == f"{path}: 12 problems"


def test_schema_problems_come_first_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write(tmp_path, {"api": {"tokn": "x", "port": 70000}, "recievers": []})
    code, out, _ = run("check-config", str(path), capsys=capsys)
    assert code == 1
    assert out.splitlines() == [
        f"{path}: api.port: Input should be less than or equal to 65535",
        f"{path}: api.tokn: unknown key (did you mean token?)",
        f"{path}: recievers: unknown key (did you mean receivers?)",
    ]


def test_one_pass_reports_schema_problems_and_every_other_problem(tmp_path: Path) -> None:
    """The real process: what the schema refuses and what the other checks find, together
    (never "fix these, run again, find more"), unknown keys with the nearest known one."""
    path = write(
        tmp_path,
        {
            "api": {"tokn": "x", "port": 70000},
            "notfy": {},
            "receivers": [
                {
                    "name": "pd",
                    "type": "pagerduty",
                    "url": "https://events.pagerduty.com/v2/enqueue",
                    "timeout_s": "fast",
                    "match": {"tier": ["capcity"]},
                }
            ],
            "store": {"url": "mysql://db/x"},
        },
    )
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", "check-config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert [line.removeprefix(f"{path}: ") for line in run.stdout.splitlines()] == [
        "api.port: Input should be less than or equal to 65535",
        "api.tokn: unknown key (did you mean token?)",
        "receivers[0] (pd).timeout_s: Input should be a valid number, unable to parse string "
        "as a number",
        "notfy: unknown key (did you mean notify?)",
        "receivers[0] (pd): a pagerduty receiver needs routing_key (or routing_key_env / "
        "routing_key_file)",
        "receivers[0] (pd): match.tier: 'capcity' is not a tier (one of: compatibility, "
        "integration, capacity, other, none)",
        "store.url: mysql is not supported (sqlite or postgresql)",
    ]
    assert run.stderr == f"{path}: 7 problems\n"


def test_yaml_errors_and_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "api:\n  host: [1\n")
    code, out, _ = run("check-config", str(path), capsys=capsys)
    assert code == 1
    assert re.fullmatch(rf"{re.escape(str(path))}: line 3 column 1: not valid YAML: .+\n", out)
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("api: {port: 9090}\n"))
    code, out, _ = run("check-config", "-", capsys=capsys)
    assert (code, out) == (0, "stdin: ok\n")


def test_an_open_api_beyond_loopback_is_a_problem_unless_the_env_gives_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SENTINEL_ALLOW_UNAUTHENTICATED", raising=False)
    path = write(tmp_path, {"api": {"host": "0.0.0.0"}})
    code, out, _ = run("check-config", str(path), capsys=capsys)
    assert code == 1 and "without api.token" in out
    monkeypatch.setenv("SENTINEL_API__TOKEN", "t0ken-kQ8vX2mP9rL4tW7zY1nB3cD5")
    assert check_config(path) == []


def test_probe_connects_and_binds(tmp_path: Path) -> None:
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()
    try:
        path = write(
            tmp_path,
            {
                "api": {"port": busy},
                "sources": {"forward": None},
                "receivers": [
                    {"name": "r", "type": "slack", "url": f"http://127.0.0.1:{dead}/x"},
                    {"name": "ok", "type": "slack", "url": f"http://127.0.0.1:{busy}/x"},
                ],
            },
        )
        assert check_config(path) == []
        problems = check_config(path, probe=True)
    finally:
        taken.close()
    assert problems == [
        f"api: cannot listen on 127.0.0.1:{busy}: Address already in use",
        f"receivers[0] (r): cannot connect to 127.0.0.1:{dead}: Connection refused",
    ]


def test_the_shipped_files_check_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_config(DEPLOY / "sentinel.example.yaml") == []
    monkeypatch.setenv("SENTINEL_API__TOKEN", "from-the-secret-kQ8vX2mP9rL4tW7zY1nB3cD5")
    cm = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "configmap.yaml").read_text())
    text = cm["data"]["sentinel.yaml"]
    assert check_config(write(tmp_path, text)) == []
    # the commented receivers, with the Secret's keys as the deployment mounts them
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for key in ("pagerduty-routing-key", "slack-webhook-url", "webhook-secret"):
        (secrets / key).write_text(
            "https://hooks.slack.com/services/T/B/x\n"
            if key == "slack-webhook-url"
            else f"{key}-value\n"
        )
    block = re.search(r"^# receivers:\n((?:#.*\n)+)", text, flags=re.M)
    assert block
    receivers = "receivers:\n" + "\n".join(ln[2:] for ln in block.group(1).splitlines())
    enabled = text.replace(
        "receivers: []\n",
        receivers.replace("/var/run/secrets/vllm-sentinel", str(secrets)) + "\n",
        1,
    )
    path = write(tmp_path, enabled, "enabled.yaml")
    assert check_config(path) == []
    pd, slack, hook = load_checked(path).receivers
    assert pd.routing_key == "pagerduty-routing-key-value"
    assert slack.url.startswith("https://hooks.slack.com/")
    assert hook.secret == "webhook-secret-value"
    dep = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "deployment.yaml").read_text())
    spec = dep["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["secrets"] == "/var/run/secrets/vllm-sentinel"
    vol = next(v for v in spec["volumes"] if v["name"] == "secrets")
    assert vol["secret"]["secretName"] == "vllm-sentinel"


# ---- one line, never a traceback ---------------------------------------------------------------
def test_serve_refuses_a_bad_file_with_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    db = tmp_path / "never.db"
    path = write(
        tmp_path,
        {
            "store": {"url": f"sqlite:///{db}"},
            "api": {"tokn": "x"},
            "receivers": [{"name": "r", "type": "slack", "url_env": "NOPE_X"}],
        },
    )
    code, out, err = run("serve", "--config", str(path), capsys=capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "vllm-sentinel serve: api.tokn: unknown key (did you mean token?)",
        "vllm-sentinel serve: receivers[0] (r): url_env: environment variable NOPE_X is not set",
    ]
    path = write(
        tmp_path,
        {
            "store": {"url": f"sqlite:///{db}"},
            "receivers": [
                {
                    "name": "r",
                    "type": "slack",
                    "url": "https://x.io",
                    "match": {"tier": ["capcity"]},
                }
            ],
        },
    )
    code, _, err = run("serve", "--config", str(path), capsys=capsys)
    assert code == 2 and "match.tier: 'capcity' is not a tier" in err
    code, _, err = run("serve", "--config", str(tmp_path / "nope.yaml"), capsys=capsys)
    assert (code, err) == (
        2,
        f"vllm-sentinel serve: {tmp_path / 'nope.yaml'}: cannot read: No such file or directory\n",
    )
    assert not db.exists()


def test_the_real_process_prints_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, {"api": {"host": "0.0.0.0"}, "store": {"url": "sqlite:///x.db"}})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith("vllm-sentinel serve: refusing to serve the API on 0.0.0.0 without api.token")
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "feedback-export",
            "--config",
            str(write(tmp_path, "store: {url: 5, pool: 1}", "b.yaml")),
            "--out",
            "-",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "vllm-sentinel feedback-export: store.pool: unknown key" in r.stderr


# ---- --version, --help -------------------------------------------------------------------------
def test_version(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"vllm-sentinel {__version__}\n"


def _subparsers(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


def test_every_command_explains_itself_and_every_option() -> None:
    import argparse

    commands = dict(_subparsers(_parser()))
    assert {
        "classify",
        "train",
        "evaluate",
        "serve",
        "check-config",
        "rules",
        "feedback-export",
    } <= {c[0] for c in commands}
    assert ("rules", "list") in commands and ("rules", "test") in commands
    for path, sub in commands.items():
        assert sub.prog == "vllm-sentinel " + " ".join(path)
        assert sub.description and sub.description[0].isupper(), path
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, (path, action.dest)
    classify = commands[("classify",)]
    files = next(a for a in classify._actions if a.dest == "files")
    assert "-" in files.help and "stdin" in files.help
    check = commands[("check-config",)]
    assert "stdin" in next(a for a in check._actions if a.dest == "file").help


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["classify"],
        ["serve"],
        ["check-config"],
        ["rules"],
        ["rules", "list"],
        ["rules", "test"],
        ["train"],
        ["evaluate"],
        ["feedback-export"],
    ],
)
def test_help_exits_zero(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: vllm-sentinel{' ' if argv else ''}{' '.join(argv)}")
    assert "Exit codes" in out


def test_train_help_names_the_command(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert capsys.readouterr().out.startswith("usage: vllm-sentinel train")


def test_config_errors_are_config_error_subclasses() -> None:
    with pytest.raises(ConfigError) as err:
        load_checked(None, "api: {port: x}")
    assert err.value.problems == [
        "api.port: Input should be a valid integer, unable to parse string as an integer"
    ]
    assert ReceiverSettings(name="n", type="slack", url="https://x").url == "https://x"
