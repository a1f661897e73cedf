"""Reading a settings file: its YAML, the settings schema's refusals in words (where, what,
the nearest known key; never a value), and the settings once the refused keys are dropped."""

from __future__ import annotations

import copy
import difflib
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
    lines = []
    for err in exc.errors():
        loc = tuple(
            p
            for p in err["loc"]
            if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))
        )
        name = _receiver_name(data, loc)
        where = _loc(loc)
        if name:  # receivers[3] (pd).timeout_s
            where = f"{_loc(loc[:2])} ({name})" + "".join(
                f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[2:]
            )
        if err["type"] == "extra_forbidden":
            near = difflib.get_close_matches(str(loc[-1]), _known_keys(loc[:-1]), n=1)
            lines.append(f"{where}: unknown key" + (f" (did you mean {near[0]}?)" if near else ""))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {msg}")
    return lines


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model an annotation holds (``X | None``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for inner in typing.get_args(annotation):
        found = _model_of(inner)
        if found is not None:
            return found
    return None


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the section at ``loc`` takes (for "did you mean")."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(str(part))
        model = _model_of(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def without_errors(data: dict[str, Any], exc: ValidationError) -> Settings | None:
    """The settings once every key the schema refused is dropped (its default then), so the
    other checks run in the same pass; None when that is not enough (a required key)."""
    data = copy.deepcopy(data)
    for _ in range(4):
        for err in reversed(exc.errors()):  # later list items first: indices stay right
            loc = [p for p in err["loc"] if not str(p).startswith(("function-", "tagged-union"))]
            parent: Any = data
            for part in loc[:-1]:
                try:
                    parent = parent[part]
                except (KeyError, IndexError, TypeError):
                    return None
            if not loc or err["type"] == "missing" or not isinstance(parent, dict | list):
                return None
            try:
                del parent[loc[-1]]
            except (KeyError, IndexError, TypeError):
                return None
        try:
            return Settings(**data)
        except ValidationError as again:
            exc = again
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
