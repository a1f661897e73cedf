"""All settings in one pydantic object: a YAML file (``--config``), overridden by
``SENTINEL_*`` environment variables (nested with ``__``, e.g.
``SENTINEL_STORE__URL=postgresql://...``, ``SENTINEL_API__TOKEN=...``).

With no file and no environment the service starts on embedded defaults: SQLite file,
HTTP + forward ingest on localhost, no Kafka.

Every setting ``X`` of a section can instead be given as ``X_env`` (the name of an
environment variable that holds it) or ``X_file`` (a file that holds it, e.g. a mounted
Kubernetes Secret; one trailing newline is dropped): ``routing_key_file:
/etc/vllm-sentinel/secrets/pagerduty-routing-key``, ``url_env: SLACK_WEBHOOK_URL``. Unknown
keys are errors in every section. ``vllm-sentinel check-config FILE`` reports every problem.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from service.shipped import shipped_dir

INDIRECT = {"_env": "environment variable", "_file": "file"}


def shipped_judgement(section: str, key: str) -> Any:
    """The default of a setting the rules data owns: ``section.key`` of the shipped
    ``rules/judgements.yaml`` (where it is documented)."""
    with (shipped_dir("rules") / "judgements.yaml").open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)[section][key]


def resolve_indirect(fields: Any, data: Any) -> Any:
    """Replace ``X_env`` / ``X_file`` keys of a section's input by ``X`` read from the
    environment / the file (``fields``: the section's field names)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key in data:
        if not isinstance(key, str):
            continue
        suffix = next((sfx for sfx in INDIRECT if key.endswith(sfx)), None)
        if suffix is None:
            continue
        stem = key[: -len(suffix)]
        if stem not in fields or key in fields:
            continue
        source = out.pop(key)
        if source is None:
            continue
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"{key} must name an {INDIRECT[suffix]}")
        if data.get(stem) is not None:
            raise ValueError(f"give {stem} or {key}, not both")
        if suffix == "_env":
            value = os.environ.get(source)
            if value is None:
                raise ValueError(f"{key}: environment variable {source} is not set")
        else:
            try:
                value = Path(source).read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"{key}: cannot read {source}: {exc.strerror or exc}") from None
            value = value[:-1] if value.endswith("\n") else value
            value = value[:-1] if value.endswith("\r") else value
        out[stem] = value
    return out


class Section(BaseModel):
    """A settings section: unknown keys are errors; any setting may come from the
    environment or a file (``X_env`` / ``X_file``, see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _indirect(cls, data: Any) -> Any:
        return resolve_indirect(cls.model_fields, data)


def check_secret(value: str | None) -> str | None:
    """A token or shared key is unset (None) or real: an empty or whitespace-only value is
    refused rather than taken as "no auth" or as a key anyone can guess."""
    if value is not None and not value.strip():
        raise ValueError("is empty or whitespace only; leave it unset (null) for none")
    return value


class ApiUser(Section):
    """A named user: its bearer token and role; its writes are recorded under ``name``."""

    name: str = Field(..., min_length=1, max_length=100)
    token: str
    role: Literal["read", "write"] = "write"

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if value != value.strip() or not value.isprintable():
            raise ValueError("a user's name has no surrounding spaces or control characters")
        return value

    @field_validator("token")
    @classmethod
    def _no_blank_token(cls, value: str) -> str:
        return check_secret(value) or value


class ApiSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)  # (0: any free port, for tests)
    token: str | None = None  # bearer token for writes and ingest; None = no auth (dev only)
    read_token: str | None = None  # optional bearer token for reads as well
    allow_unauthenticated: bool = False  # permit no token on a non-loopback host (not advised)
    # named users; api.token stays valid as the actor "token". A request from a trusted proxy
    # (CIDRs) naming a user in user_header is that user (role: its api.users entry's, else
    # proxy_role). See service/api/actors.py.
    users: list[ApiUser] = Field(default_factory=list)
    trusted_proxies: list[IPvAnyNetwork] = Field(default_factory=list)
    user_header: str = Field("X-Forwarded-User", min_length=1)
    proxy_role: Literal["read", "write"] = "write"
    # listener bounds (SECURITY.md): open connections (past it the oldest idle one is
    # closed; kept below the descriptor limit), requests at once (503 beyond; the probes
    # always pass), seconds a connection may go without a request (slow or no headers),
    # seconds an idle keep-alive connection is kept
    max_connections: int = Field(1024, ge=16)
    max_requests_in_flight: int = Field(64, ge=1)
    header_timeout_s: float = Field(10.0, gt=0)
    keep_alive_s: int = Field(5, ge=1)

    @model_validator(mode="after")
    def _room_for_probes(self) -> ApiSettings:
        if self.max_connections < self.max_requests_in_flight + 8:
            raise ValueError(
                "max_connections must exceed max_requests_in_flight by at least 8 "
                "(room for the probes when every request slot is busy)"
            )
        return self

    @field_validator("token", "read_token")
    @classmethod
    def _no_blank_token(cls, value: str | None) -> str | None:
        return check_secret(value)

    @model_validator(mode="after")
    def _unique_users(self) -> ApiSettings:
        tokens = [u.token for u in self.users] + [t for t in (self.token, self.read_token) if t]
        if len({u.name for u in self.users}) < len(self.users) or len(set(tokens)) < len(tokens):
            raise ValueError("api.users: every name and every token must be unique")
        return self


class StoreSettings(Section):
    url: str = "sqlite:///sentinel.db"
    pool_size: int = 5
    # retention (0 = keep forever): resolved incidents (with their outbox events and
    # deliveries; incidents with feedback or an undelivered change are kept) and stream
    # snapshots no line was seen for (streams with an open incident are kept)
    incident_retention_days: float = Field(90.0, ge=0)
    stream_retention_days: float = Field(30.0, ge=0)
    retention_interval_s: float = Field(600.0, gt=0)  # how often the prune runs


class KafkaSettings(Section):
    bootstrap: str = "127.0.0.1:9092"
    topics: list[str] = Field(default_factory=lambda: ["vllm-logs"])
    group: str = "vllm-sentinel"
    client: Literal["kafka-python", "confluent-kafka"] = "kafka-python"
    # message values: auto (detect per value: JSON/msgpack records, else text lines), or a
    # contract: fluent (only Fluent Bit / Fluentd records; anything else is counted as a
    # reject and skipped), raw, cri, docker (text lines in that envelope)
    format: Literal["auto", "fluent", "raw", "cri", "docker"] = "auto"
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl_mechanism: str | None = None  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    max_poll_records: int = 2000
    max_poll_interval_ms: int = 30000
    session_timeout_ms: int = 10000
    extra: dict[str, Any] = Field(default_factory=dict)  # passed through to the client


class ForwardSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(24224, ge=0, le=65535)  # (0: any free port, for tests)
    # required beyond loopback (the service refuses to start without it there)
    shared_key: str | None = None
    allow_unauthenticated: bool = False  # permit no shared_key on a non-loopback host
    self_hostname: str = "vllm-sentinel"
    tls_cert: str | None = None
    tls_key: str | None = None
    max_connections: int = Field(512, ge=1)  # one more is accepted and closed at once
    idle_timeout_s: float = Field(120.0, gt=0)  # close a connection silent this long
    max_message_bytes: int = Field(32 << 20, ge=1024)  # one frame, as sent
    max_pending_bytes: int = Field(128 << 20, ge=1024)  # unfinished frames, all connections

    @field_validator("shared_key")
    @classmethod
    def _no_blank_key(cls, value: str | None) -> str | None:
        return check_secret(value)


class SourcesSettings(Section):
    kafka: KafkaSettings | None = None
    forward: ForwardSettings | None = Field(default_factory=ForwardSettings)
    http: bool = True


class ReceiverSettings(Section):
    name: str
    type: Literal["slack", "webhook", "pagerduty", "alertmanager"]
    url: str  # or url_env / url_file (as every setting: secret_env, routing_key_file ...)
    secret: str | None = None  # webhook: HMAC-SHA256 key for X-Sentinel-Signature
    routing_key: str | None = None  # pagerduty
    # alertmanager: open alerts are posted again this often, each with endsAt = now + 4x this
    # (Alertmanager ends an alert nobody re-posts; Prometheus does the same)
    resend_interval_s: float = Field(60.0, gt=0)
    labels: dict[str, str] = Field(default_factory=dict)  # alertmanager: extra static labels
    match: dict[str, list[str]] = Field(
        default_factory=dict
    )  # tier/category/namespace/severity/label:k
    send_resolved: bool = True
    rate_limit_per_minute: int = 30
    timeout_s: float = 5.0


def default_external_url(host: str, port: int) -> str:
    """``http://host:port`` of the API (a wildcard host: 127.0.0.1; IPv6 in brackets)."""
    host = host.strip() or "127.0.0.1"
    if host in ("0.0.0.0", "::", "*"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


class SlackAppSettings(Section):
    """The Slack app whose buttons post to ``POST /slack/actions`` (no signing secret: 404),
    and the hosts a button's ``response_url`` may name (the message is updated there)."""

    signing_secret: str | None = None
    response_url_hosts: list[str] = Field(default_factory=lambda: ["hooks.slack.com"])
    max_age_s: float = Field(300.0, gt=0)  # older requests are refused (replays)

    @field_validator("signing_secret")
    @classmethod
    def _no_blank_secret(cls, value: str | None) -> str | None:
        return check_secret(value)


class NotifySettings(Section):
    group_wait_s: float = 1.0  # wait this long after a change so late root-cause lines coalesce
    max_attempts: int = 0  # 0 = retry forever (with backoff); alerts are never dropped
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0
    # base URL of the API for links in notifications; unset: http://<api.host>:<api.port>
    # (a wildcard host reads as 127.0.0.1, which ``check-config`` flags)
    external_url: str = "http://127.0.0.1:8080"
    slack: SlackAppSettings = Field(default_factory=lambda: SlackAppSettings())


class StallSettings(Section):
    """Per-stage deadlines (seconds without reaching the next stage). ``deadlines_s``, when
    set, wins over every rules file; its default is ``stalls.deadlines_s`` of the shipped
    ``rules/judgements.yaml`` (a team's ``judgements.yaml`` may change it there)."""

    enabled: bool = True
    check_interval_s: float = 15.0
    deadlines_s: dict[str, float] = Field(
        default_factory=lambda: shipped_judgement("stalls", "deadlines_s")
    )

    def deadlines_if_set(self) -> dict[str, float] | None:
        """The deadlines when this setting was given, else None (the rules decide)."""
        return self.deadlines_s if "deadlines_s" in self.model_fields_set else None


class RestartSettings(Section):
    """Restarts of one workload: a new run in its stream (a new banner, API server pid or
    later start), a new container of its pod, a pod that replaced another of its workload on
    the same node. The same failure again counts one more restart on the open incident
    (stored, not notified); at ``crash_loop_attempts`` failed starts it becomes a crash loop
    (one notification, saying whether restarting can help). When set it wins over every
    rules file; its default is ``restarts.crash_loop_attempts`` of the shipped
    ``rules/judgements.yaml``."""

    crash_loop_attempts: int = Field(
        default_factory=lambda: shipped_judgement("restarts", "crash_loop_attempts"), ge=2
    )

    def attempts_if_set(self) -> int | None:
        """The count when this setting was given, else None (the rules decide)."""
        return self.crash_loop_attempts if "crash_loop_attempts" in self.model_fields_set else None


class StreamSettings(Section):
    """Streams kept in memory (their snapshots are in the store and come back with their next
    line): at most ``max_in_memory``, and none untouched for ``idle_evict_s``."""

    max_in_memory: int = Field(50_000, ge=100)
    idle_evict_s: float = Field(3600.0, gt=0)


class FleetSettings(Section):
    """Fleet incidents: N or more workloads failing with the same fleet-prone category and a
    shared key (driver branch, image, node pool, NCCL version, namespace) within the window
    page once as one fleet incident; the per-pod pages are inhibited.

    The cost is latency: a fleet-prone incident's first page waits ``hold_s`` after the
    incident was first stored, so the other pods of a fleet can arrive and the fleet page
    goes out instead of the first pod's. Other categories (capacity, config, ...) never wait.
    """

    enabled: bool = True
    threshold: int = Field(3, ge=2)  # workloads/nodes with the category and a shared key
    window_s: float = Field(900.0, gt=0)  # members' opened_at within this of each other
    # how long a fleet-prone incident's first page is held before it may page alone
    hold_s: float = Field(20.0, ge=0)


class RulesSettings(Section):
    """Rules a team adds without a fork: directories of signature files (the schema of
    ``rules/signatures/*.yaml``, each rule with its tested examples); a rule with the id of a
    shipped one replaces it; ``disabled`` ids are switched off; ``overrides`` change fields of
    a rule by id (``{kv-cache-no-memory: {priority: 90}}``)."""

    dirs: list[str] = Field(default_factory=list)
    disabled: list[str] = Field(default_factory=list)
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SENTINEL_", env_nested_delimiter="__", extra="forbid"
    )

    api: ApiSettings = Field(default_factory=ApiSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    sources: SourcesSettings = Field(default_factory=SourcesSettings)
    receivers: list[ReceiverSettings] = Field(default_factory=list)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    stall: StallSettings = Field(default_factory=StallSettings)
    restarts: RestartSettings = Field(default_factory=RestartSettings)
    streams: StreamSettings = Field(default_factory=StreamSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    rules: RulesSettings = Field(default_factory=RulesSettings)
    use_model: bool = True
    # owner of delivery claims; stable across restarts so a restarted process takes its
    # claims back at once. Default: <hostname>-<hash of store URL and API address> (in
    # Kubernetes HOSTNAME is the pod name). Must differ between live replicas.
    instance_id: str | None = Field(None, max_length=128)

    @model_validator(mode="after")
    def _default_external_url(self) -> Settings:
        if "external_url" not in self.notify.model_fields_set:
            self.notify.external_url = default_external_url(self.api.host, self.api.port)
            self.notify.model_fields_set.discard("external_url")  # still "unset"
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # env overrides init (the YAML file is passed as init kwargs)
        return env_settings, init_settings


def load_settings(path: str | Path | None = None) -> Settings:
    """Settings from a YAML file (optional) with ``SENTINEL_*`` env overrides."""
    data: dict[str, Any] = {}
    if path:
        with Path(path).open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
    return Settings(**data)
