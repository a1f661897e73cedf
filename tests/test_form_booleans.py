"""Form booleans read strictly (#27): the dashboard's silence form took ``cluster_wide=false``,
``0`` or ``off`` as true (any non-empty value). ``false``/``0``/``off``/``no`` are false,
``true``/``1``/``on``/``yes`` true, anything else is refused."""

from __future__ import annotations

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from service.ui.page import form_bool
from tests.api_support import WRITE_TOKEN
from tests.test_api_ui import critical, csrf_of, fresh, login  # noqa: F401 - fixture


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, False),
        ("", False),
        ("false", False),
        ("0", False),
        ("off", False),
        ("No", False),
        ("true", True),
        ("1", True),
        ("on", True),
        ("YES", True),
    ],
)
def test_form_bool(value: str | None, want: bool) -> None:
    assert form_bool(value, "x") is want


@pytest.mark.parametrize("value", ["maybe", "2", "falsey", "on off"])
def test_an_unknown_boolean_is_refused(value: str) -> None:
    with pytest.raises(HTTPException) as exc:
        form_bool(value, "cluster_wide")
    assert exc.value.status_code == 400 and "cluster_wide" in str(exc.value.detail)


def test_the_silence_form_reads_cluster_wide_false_as_false(fresh: TestClient) -> None:  # noqa: F811
    login(fresh, WRITE_TOKEN)
    inc = critical(fresh)[0]
    token = csrf_of(fresh.get("/ui/silences", params={"incident": inc["id"]}).text)
    form = {
        "csrf": token,
        "use_category": "1",
        "value_category": inc["category"],
        "duration": "1h",
        "comment": "category only",
    }
    for no in ("false", "0", "off", "no"):
        r = fresh.post("/ui/silences", data={**form, "cluster_wide": no}, follow_redirects=False)
        # refused as a category-wide silence: the form comes back as typed, nothing made
        assert r.status_code == 422 and "cluster_wide" in r.text, no
    assert fresh.get("/silences", params={"active": "true"}).json() == []  # none made
    r = fresh.post("/ui/silences", data={**form, "cluster_wide": "maybe"}, follow_redirects=False)
    assert r.status_code == 400
    r = fresh.post("/ui/silences", data={**form, "cluster_wide": "on"}, follow_redirects=False)
    assert r.status_code == 303 and "done=silenced" in r.headers["location"]
    assert len(fresh.get("/silences", params={"active": "true"}).json()) == 1


def test_the_api_s_boolean_queries_are_strict_too(fresh: TestClient) -> None:  # noqa: F811
    login(fresh, WRITE_TOKEN)
    assert fresh.get("/silences", params={"active": "maybe"}).status_code == 422
    for no in ("false", "0", "off", "no"):
        assert fresh.get("/silences", params={"active": no}).status_code == 200
