"""The house's floors (docs/architecture.md): data flows one way, from the records at the bottom
to the CLI at the top, and no import runs back up.

Read from the code itself (every ``import`` in ``service/``, those inside functions too):

* no cycle between modules, none between packages;
* no import of a higher floor (a package may import its own floor and the ones below);
* no import of ``service`` inside a function, except the CLI's lazy imports (its
  sub-commands load only what they run);
* ``service.training`` (fitting and evaluating the text model, the ``[train]`` extra) is
  imported only by the CLI;
* ``store`` and ``notify`` import no ``service.classify`` (incidents reach them as the shapes
  of ``service.incidents``);
* no module over 450 lines.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
MAX_LINES = 450

# floor of each top-level piece of service/ (a module or a package); lower floors first
FLOORS: list[tuple[str, ...]] = [
    ("records", "labels", "config", "taxonomy", "metrics", "ratelog", "netguard", "shipped"),
    ("parse",),
    ("incidents",),
    ("ingest",),
    ("sources",),
    ("classify",),
    ("offline",),
    ("store",),
    ("pipeline", "notify"),
    ("context",),
    ("api",),
    ("ui",),
    ("app", "configcheck"),
    ("training",),
    ("cli",),
]
FLOOR = {name: n for n, names in enumerate(FLOORS) for name in names}
LAZY_OK = {"cli"}  # the CLI's modules import their commands' modules when they run
TRAINING_IMPORTERS = {"cli"}  # the pieces that may import service.training
# the pieces that read incidents only as shapes (service.incidents), never the classifier
SHAPES_ONLY = {"store", "notify"}


def modules() -> dict[str, Path]:
    out = {}
    for path in SERVICE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = module.split(".") if is_pkg else module.split(".")[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    return [t for n in names if n.split(".")[0] == "service" and (t := _resolve(n))]


def imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module → what it imports at run time, module → what it imports inside functions);
    imports under ``if TYPE_CHECKING:`` are left out (they never run)."""
    runtime: dict[str, set[str]] = defaultdict(set)
    lazy: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        is_pkg = path.name == "__init__.py"

        def visit(
            node: ast.AST, in_function: bool, module: str = module, is_pkg: bool = is_pkg
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target in _targets(child, module, is_pkg):
                        if target != module:
                            runtime[module].add(target)
                            if in_function:
                                lazy[module].add(target)
                    continue
                nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                visit(child, in_function or nested)

        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return runtime, lazy


RUNTIME, LAZY = imports()


def piece(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_every_piece_of_service_has_a_floor() -> None:
    assert {piece(m) for m in MODULES if m != "service"} - set(FLOOR) == set()


def test_no_cycle_between_modules() -> None:
    assert cycles(RUNTIME) == []


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, targets in RUNTIME.items():
        for dst in targets:
            if src != "service" and dst != "service" and piece(src) != piece(dst):
                graph[piece(src)].add(piece(dst))
    assert cycles(graph) == []


def test_no_import_runs_back_up() -> None:
    upward = {
        (src, dst)
        for src, targets in RUNTIME.items()
        for dst in targets
        if src != "service" and dst != "service" and FLOOR[piece(dst)] > FLOOR[piece(src)]
    }
    assert upward == set()


def test_no_import_hidden_inside_a_function() -> None:
    hidden = {
        (src, dst) for src, targets in LAZY.items() if piece(src) not in LAZY_OK for dst in targets
    }
    assert hidden == set()


def test_only_the_cli_imports_the_training_package() -> None:
    importers = {
        piece(src)
        for src, targets in RUNTIME.items()
        for dst in targets
        if piece(dst) == "training" and piece(src) != "training"
    }
    assert importers <= TRAINING_IMPORTERS


def test_the_store_and_notify_know_incidents_only_as_shapes() -> None:
    leaks = {
        (src, dst)
        for src, targets in RUNTIME.items()
        for dst in targets
        if piece(src) in SHAPES_ONLY and piece(dst) == "classify"
    }
    assert leaks == set()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_450_lines(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines"


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    """The graph reading itself: a known cycle and a known climb are found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("from service.api import app\nfrom . import rules\nimport service.ui\n")
    found = [
        t
        for n in tree.body
        if isinstance(n, ast.ImportFrom)
        for t in _targets(n, "service.classify.engine", False)
    ]
    assert found == ["service.api.app", "service.classify.rules"]
    found = [
        t
        for n in tree.body
        if isinstance(n, ast.Import)
        for t in _targets(n, "service.classify.engine", False)
    ]
    assert found == ["service.ui"]
