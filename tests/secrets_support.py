"""A real failing vLLM log with secrets planted where issue #20 found them leaking: the
``non-default args`` dict (``'api_key': [...]``, ``'hf_token': '...'``) and a URL with
``?token=hf_...`` in the root-cause line. Shared by tests/test_redaction.py and
tests/test_e2e_redaction.py."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect, text

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
SOURCE = REAL / "model-unavailable-offline.log"

HF_TOKEN = "hf_QpXr7TmWvLs2NbKd9YcJfHgZa4EuR8oIyP3x"
URL_TOKEN = "hf_UrlTokenZ9y8X7w6V5u4T3s2R1q0PoNmLkJi"
API_KEYS = ("sk-team-alpha-Zx81Qw27Er", "team-beta-plain-key-4431")
SECRETS = (HF_TOKEN, URL_TOKEN, *API_KEYS)

ARGS = (
    "(APIServer pid=16793) INFO 12-02 14:40:31 [api_utils.py:286] non-default args: "
    "{'model_tag': 'some-org/missing-model', 'model': 'some-org/missing-model', "
    f"'api_key': ['{API_KEYS[0]}', '{API_KEYS[1]}'], 'hf_token': '{HF_TOKEN}'}}"
)
URL = f"https://huggingface.co/api/models/some-org/missing-model/revision/main?token={URL_TOKEN}"


def secret_lines() -> list[str]:
    """The real capture's lines with the secrets planted."""
    out = []
    for line in SOURCE.read_text().splitlines():
        if "non-default args:" in line:
            line = ARGS
        elif line.startswith("huggingface_hub.errors.LocalEntryNotFoundError"):
            line = f"{line} (while fetching {URL})"
        out.append(line)
    assert any(HF_TOKEN in x for x in out) and any(URL_TOKEN in x for x in out)
    return out


def write_secret_log(path: Path) -> Path:
    path.write_text("\n".join(secret_lines()) + "\n")
    return path


def leaked(text: str) -> list[str]:
    """The planted secrets found in ``text``."""
    return [s for s in SECRETS if s in text]


def dump_tables(url: str) -> str:
    """Every row of every table of the store at ``url``, one ``repr`` a line."""
    eng = create_engine(url)
    out = []
    with eng.connect() as c:
        for table in inspect(eng).get_table_names():
            out += [repr(tuple(row)) for row in c.execute(text(f'SELECT * FROM "{table}"'))]
    eng.dispose()
    return "\n".join(out)
