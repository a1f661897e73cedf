"""Every secret shape the redactor must mask (issue #27's attack run and more), each planted
the way a log prints it. Shared by tests/test_redaction_oracle.py (offline, with a secret
scanner as the oracle) and tests/test_e2e_redaction.py (the real service, every output).

A :class:`Shape` makes a line fragment holding a secret from a seed; ``secrets`` are the
strings that must not survive anywhere (for a secret hidden under a layer - escaped,
percent-encoded, split by a zero-width space - they are the pieces a reader could rebuild
it from, each long enough to be useless alone... but not once masked: none may remain)."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Planted:
    shape: str
    fragment: str  # what is appended to a real log line
    secrets: tuple[str, ...]  # none may survive redaction


@dataclass(frozen=True)
class Shape:
    name: str
    make: Callable[[random.Random], Planted]


def rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    """Random characters that hold an upper-case letter, a lower-case one and a digit."""
    while True:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if alphabet != ALNUM or (
            any(c.isupper() for c in s)
            and any(c.islower() for c in s)
            and any(c.isdigit() for c in s)
        ):
            return s


def _simple(name: str, template: str, n: int = 24, prefix: str = "") -> Shape:
    def make(rng: random.Random) -> Planted:
        s = prefix + rand(rng, n)
        return Planted(name, template.format(s=s), (s,))

    return Shape(name, make)


def _hf(rng: random.Random) -> str:
    return "hf_" + rand(rng, 34)


def _sk(rng: random.Random) -> str:
    return "sk-proj-" + rand(rng, 48)


def _jwt(rng: random.Random) -> str:
    return "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI" + rand(rng, 12) + "In0." + rand(rng, 43)


def _custom(name: str, build: Callable[[random.Random], tuple[str, tuple[str, ...]]]) -> Shape:
    def make(rng: random.Random) -> Planted:
        fragment, secrets = build(rng)
        return Planted(name, fragment, secrets)

    return Shape(name, make)


def _pw(rng: random.Random, special: str) -> str:
    return rand(rng, 8) + special + rand(rng, 8)


def _aws(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = "AKIA" + rand(rng, 15, string.ascii_uppercase) + str(rng.randrange(10))
    return f"s3 download with key {s} failed", (s,)


def _args(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    a, b, h = "sk-team-" + rand(rng, 16), rand(rng, 20), _hf(rng)
    line = f"non-default args: {{'model': 'x', 'api_key': ['{a}', '{b}'], 'hf_token': '{h}'}}"
    return line, (a, b, h)


def _zero_width(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = _hf(rng)
    return f"login with {s[:20]}\u200b{s[20:]}", (s, s[:20] + "\u200b" + s[20:], s[3:20])


def _percent_hf(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = rand(rng, 24)
    return f"GET /cb?redirect=x&token%3D{s} HTTP/1.1", (s,)


def _double_json(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = rand(rng, 24)
    return f'body="{{\\\\\\"api_key\\\\\\": \\\\\\"{s}\\\\\\"}}"', (s,)


def _unicode_escape(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = rand(rng, 24)
    return f'"{{\\u0022hf_token\\u0022: \\u0022{s}\\u0022}}"', (s,)


def _pem(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + rand(rng, 40)
    return (
        f'"private_key": "-----BEGIN PRIVATE KEY-----\\n{body}\\n-----END PRIVATE KEY-----\\n"',
        (body,),
    )


def _letter_after(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = _hf(rng)
    return f"hub token {s}é rejected", (s,)


def _fullwidth(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = rand(rng, 24)
    return f"api_key＝{s} loaded", (s,)


def _nbsp(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    s = rand(rng, 24)
    return f"HF_TOKEN:\u00a0\u00a0{s}", (s,)


SHAPES: tuple[Shape, ...] = (
    # issue #20's shapes
    _custom("non_default_args", lambda r: _args(r)),
    _custom(
        "url_token_query",
        lambda r: ((s := _hf(r)), (f"GET /api/models/x?token={s} HTTP/1.1", (s,)))[1],
    ),
    _simple("authorization_bearer", "headers {{'Authorization': 'Bearer {s}'}}"),
    _simple("authorization_basic", "curl -H 'Authorization: Basic {s}' http://vllm:8000/v1/models"),
    _simple("bearer_anywhere", "retrying with bearer {s} after 401"),
    _simple("cli_api_key", "vllm serve x --api-key {s} --port 8000"),
    _simple("cli_hf_token_eq", "args: --hf-token={s} --tensor-parallel-size 2"),
    _simple("cli_password", "psql --password {s} --host db"),
    _custom("hf_bare", lambda r: ((s := _hf(r)), (f"using {s} for the hub", (s,)))[1]),
    _custom("openai_bare", lambda r: ((s := _sk(r)), (f"client configured with {s}", (s,)))[1]),
    _custom("aws_access_key_id", lambda r: _aws(r)),
    _simple("aws_secret_env", "AWS_SECRET_ACCESS_KEY={s}", 40),
    _simple("github_ghp", "git clone https://ghp_{s}@github.com/org/repo", 36),
    _simple("github_pat", "using github_pat_{s}", 60),
    _simple("slack_xoxb", "slack client init xoxb-1234567890-{s}", 24),
    _custom("pem_one_line", _pem),
    _simple("client_secret_json", '{{"level": "info", "client_secret": "{s}"}}'),
    _simple("password_assign", "connecting with password={s} failed"),
    _simple("password_colon_quoted", "connecting to postgres with password: '{s}' failed"),
    # issue #27's attack run
    _simple("json_escaped", 'msg="{{\\"api_key\\": \\"{s}\\", \\"model\\": \\"x\\"}}"'),
    _custom("json_double_escaped", _double_json),
    _custom("json_unicode_escape", _unicode_escape),
    _custom("url_encoded_token", _percent_hf),
    _simple("url_encoded_authorization", "h=Authorization%3A%20Bearer%20{s}"),
    _simple("url_double_encoded", "next=%2Fcb%3Ftoken%253D{s}"),
    _simple("k8s_env_object", '{{"env":[{{"name":"HF_TOKEN","value":"{s}"}}]}}'),
    _simple("k8s_env_go", "container env {{Name:OPENAI_API_KEY,Value:{s},ValueFrom:nil}}"),
    _simple("kubectl_describe_spaces", "token:      {s}"),
    _simple("kubectl_describe_tabs", "token:\t\t{s}"),
    _simple("secret_key_colon", "secret_key: {s}"),
    _simple("star_key_colon", "encryption_key:  {s}"),
    _simple("routing_key_eq", "pagerduty routing_key={s}"),
    _simple("namespace_list", "Namespace(model='x', api_key=['{s}'], port=8000)"),
    _simple("namespace_plain", "Namespace(model='x', api_key='{s}', port=8000)"),
    _simple("cookie_dict", "headers {{'host': 'vllm', 'cookie': 'session={s}', 'accept': '*/*'}}"),
    _simple("x_api_key_dict", "headers {{'x-api-key': '{s}', 'accept': '*/*'}}"),
    _simple("cookie_header", "Cookie: session={s}; Path=/"),
    _simple("set_cookie_header", "Set-Cookie: _oauth2_proxy={s}; HttpOnly"),
    _simple("x_auth_token_header", "X-Auth-Token: {s}"),
    _custom(
        "db_url_slash",
        lambda r: (
            (p := _pw(r, "/")),
            (f"postgresql://sentinel:{p}@db.svc:5432/x failed", (p, p[:8], p[9:])),
        )[1],
    ),
    _custom(
        "db_url_at",
        lambda r: ((p := _pw(r, "@")), (f"mysql://root:{p}@mysql:3306/app", (p, p[:8], p[9:])))[1],
    ),
    _custom(
        "db_url_colon",
        lambda r: ((p := _pw(r, ":")), (f"amqp://guest:{p}@rabbit:5672/", (p, p[:8], p[9:])))[1],
    ),
    _simple("redis_no_user", "broker redis://:{s}@cache:6379/0"),
    _simple("mongodb_srv", "mongodb+srv://app:{s}@cluster0.mongo.net/db"),
    _custom(
        "jwt_bare",
        lambda r: ((s := _jwt(r)), (f"token verified {s} for user 7", (s, s.split(".")[2])))[1],
    ),
    _simple(
        "slack_webhook", "POST https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/{s} failed", 24
    ),
    _simple(
        "discord_webhook", "notify https://discord.com/api/webhooks/123456789012345678/{s}", 40
    ),
    _simple(
        "teams_webhook",
        "POST https://acme.webhook.office.com/webhookb2/{s}@x/IncomingWebhook/y",
        30,
    ),
    _simple("private_key_id", '"private_key_id": "{s}"', 40),
    _custom("glued_x_sk", lambda r: ((s := _sk(r)), (f"key x{s} rejected", (s,)))[1]),
    _custom("glued_KEY_sk", lambda r: ((s := _sk(r)), (f"env KEY_{s}", (s,)))[1]),
    _custom("glued_hf", lambda r: ((s := _hf(r)), (f"HUGGINGFACE_TOKEN_{s}", (s,)))[1]),
    _custom("fullwidth_equals", _fullwidth),
    _custom("zero_width_space", _zero_width),
    _custom("nbsp_separator", _nbsp),
    _custom("letter_after_token", _letter_after),
    # more of our own
    _simple("google_api_key_url", "POST https://generativelanguage.example/v1/m?key=AIza{s}", 35),
    _simple(
        "azure_sas_sig", "GET https://acct.blob.example/w.bin?sv=2022-11-02&sig={s}%3D HTTP/1.1", 43
    ),
    _simple("stripe_live", "charge failed for key sk_live_{s}", 24),
    _simple("gitlab_pat", "git push with glpat-{s} rejected", 20),
    _simple("npm_token", "npm whoami with npm_{s}", 36),
    _simple("nvidia_api_key", "NIM_KEY nvapi-{s}", 64),
    _simple("refresh_token_json", '{{"refresh_token": "{s}", "expires_in": 3600}}'),
    _simple("aws_session_token_env", "AWS_SESSION_TOKEN={s}", 60),
    _simple("camel_api_key", "config {{apiKey: {s}, region: eu}}"),
    _simple("yaml_hf_token", 'hf_token: "{s}"'),
    _simple("api_key_spaced", 'api_key = "{s}"'),
    _simple("proxy_authorization", "Proxy-Authorization: Basic {s}"),
    _simple("env_openai", "OPENAI_API_KEY=sk-{s}", 48),
    _simple("https_userinfo", "pip install --index-url https://deploy:{s}@pypi.internal/simple x"),
)


def plant(seed: int = 27) -> list[Planted]:
    """One planted fragment per shape, deterministic."""
    rng = random.Random(seed)
    return [shape.make(rng) for shape in SHAPES]


def leaked(text: str, planted: list[Planted]) -> list[str]:
    """The shapes whose secrets (any piece) appear in ``text``."""
    return [p.shape for p in planted if any(s in text for s in p.secrets)]
