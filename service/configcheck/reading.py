"""Reading a settings file: its YAML, the settings schema's refusals in words (where, what,
the nearest known key; never a value), and the settings once the refused keys are dropped."""

from __future__ import annotations

import copy
import difflib
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from service.config import Settings


class ConfigError(ValueError):
    """A settings file that cannot be used; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def read_yaml(path: str | Path, text: str | None = None) -> dict[str, Any]:
    """The mapping a settings file holds (``text``: its content, already read);
    :class:`ConfigError` (one line) otherwise."""
    try:
        if text is not None:
            data = yaml.safe_load(text)
        else:
            with Path(path).open(encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"{path}:{where}: not valid YAML: {what}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{path}: expected a mapping of settings at the top level, "
                f"found {type(data).__name__}"
            ]
        )
    return data


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def validation_problems(
    exc: ValidationError, data: Mapping[str, object] | None = None
) -> list[str]:
    """One line per error: where, and what (input values are left out: they may be
    secrets)."""
    return [_problem(err, data) for err in exc.errors()]


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        p for p in loc if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))
    )


def _problem(err: Any, data: Mapping[str, object] | None) -> str:
    loc = _clean_loc(err["loc"])
    name = _receiver_name(data, loc)
    where = _loc(loc)
    if name:  # receivers[3] (pd).timeout_s
        where = f"{_loc(loc[:2])} ({name})" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[2:]
        )
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(str(loc[-1]), _known_keys(loc[:-1]), n=1)
        return f"{where}: unknown key" + (f" (did you mean {near[0]}?)" if near else "")
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model an annotation holds (``X | None``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for inner in typing.get_args(annotation):
        found = _model_of(inner)
        if found is not None:
            return found
    return None


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings model of the section at ``loc``, if it is one."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(str(part))
        model = _model_of(field.annotation) if field is not None else None
    return model


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the section at ``loc`` takes (for "did you mean")."""
    model = _model_at(loc)
    return list(model.model_fields) if model is not None else []


MAX_PASSES = 8  # schema passes one check makes (each drops what the previous one refused)
# what stands in for a required receiver setting that is missing or cannot be read, so the
# receiver's other settings are still checked in the same pass (never probed: .invalid)
STAND_IN_URL = "https://stand-in.invalid/"
RECEIVER_STAND_INS = {"url": STAND_IN_URL, "name": "#<index>", "type": "webhook"}
_INDIRECT_KEY = re.compile(r"\b(\w+)_(?:env|file)\b")


def settle(data: dict[str, Any]) -> tuple[list[str], Settings | None]:
    """Every schema problem of ``data`` and the settings once each is dropped, so the other
    checks run in the same pass. The schema shows some problems only once others are gone (a
    section's own check after its fields, a receiver's fields after an unreadable
    ``url_env``): it is asked again, up to :data:`MAX_PASSES` times, and every pass's problems
    are kept. ``None`` for the settings when they cannot be made at all."""
    original = data
    data = copy.deepcopy(data)
    problems: list[str] = []
    gone: set[tuple[Any, ...]] = set()  # X of each X_env / X_file dropped: its "missing" is said
    for _ in range(MAX_PASSES):
        try:
            return problems, Settings(**data)
        except ValidationError as exc:
            for err in exc.errors():
                if err["type"] == "missing" and _clean_loc(err["loc"]) in gone:
                    continue
                line = _problem(err, original)
                if line not in problems:
                    problems.append(line)
            if not _drop_refused(data, exc, gone):
                return problems, None
    return problems, None


def without_errors(data: dict[str, Any], exc: ValidationError) -> Settings | None:
    """The settings once every key the schema refused is dropped (see :func:`settle`)."""
    return settle(data)[1] if exc.errors() else None


def _drop_refused(data: dict[str, Any], exc: ValidationError, gone: set[tuple[Any, ...]]) -> bool:
    """Drop from ``data`` what each error refused (False when an error cannot be dropped);
    ``gone`` gets the place of each setting whose ``X_env`` / ``X_file`` was dropped."""
    for err in reversed(exc.errors()):  # later list items first: indices stay right
        loc = [p for p in err["loc"] if not str(p).startswith(("function-", "tagged-union"))]
        if not loc:
            return False
        parent: Any = data
        for part in loc[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                return False
        key = loc[-1]
        if err["type"] == "missing":
            if not _stand_in(data, loc):
                return False
            continue
        if not isinstance(parent, dict | list):
            return False
        try:
            target = parent[key]
        except (KeyError, IndexError, TypeError):
            return False
        if isinstance(target, dict) and err["type"] == "value_error":
            culprit = _culprit(loc, target, str(err["msg"]))
            if culprit is not None:  # a section's own check: drop the key it names
                del target[culprit]
                stem = _INDIRECT_KEY.fullmatch(culprit)
                if stem:
                    gone.add((*loc, culprit.rsplit("_", 1)[0]))
                continue
        del parent[key]
    return True


def _stand_in(data: dict[str, Any], loc: list[Any]) -> bool:
    """A missing receiver ``name``, ``type`` or ``url`` stood in for (the rest of that
    receiver is still checked, and its index still names it); any other missing key drops its
    list item. False when neither fits."""
    if len(loc) < 3 or not isinstance(loc[-2], int):
        return False
    try:
        container: Any = data
        for part in loc[:-2]:
            container = container[part]
        item = container[loc[-2]]
    except (KeyError, IndexError, TypeError):
        return False
    if not isinstance(container, list) or not isinstance(item, dict):
        return False
    if loc[:-2] == ["receivers"] and loc[-1] in RECEIVER_STAND_INS:
        stand_in = RECEIVER_STAND_INS[loc[-1]]
        item[loc[-1]] = f"#{loc[-2]}" if loc[-1] == "name" else stand_in
    else:
        del container[loc[-2]]
    return True


def _culprit(loc: list[Any], section: dict[str, Any], msg: str) -> str | None:
    """The key a section-level refusal is about: the ``X_env`` / ``X_file`` it names, else
    the one key whose removal makes the section valid."""
    named = _INDIRECT_KEY.search(msg)
    if named and named.group(0) in section:
        return named.group(0)
    model = _model_at(tuple(loc))
    if model is None:
        return None
    for key in reversed(list(section)):
        trial = {k: v for k, v in section.items() if k != key}
        try:
            model.model_validate(trial)
        except ValidationError:
            continue
        return key
    return None


def _receiver_name(data: Mapping[str, object] | None, loc: tuple[Any, ...]) -> str | None:
    if data and len(loc) >= 2 and loc[0] == "receivers" and isinstance(loc[1], int):
        recs = data.get("receivers")
        if isinstance(recs, list) and loc[1] < len(recs) and isinstance(recs[loc[1]], dict):
            name = recs[loc[1]].get("name")
            return str(name) if name else None
    return None


def load_checked(path: str | Path | None, text: str | None = None) -> Settings:
    """The settings of ``path`` (and ``SENTINEL_*``), or :class:`ConfigError`."""
    data = read_yaml(path or "-", text) if path or text is not None else {}
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, data)) from None
