"""The house's floors (docs/architecture.md): data flows one way, from the records at the bottom
to the CLI at the top, and no import runs back up.

Read from the code itself (every ``import``, ``importlib.import_module`` and ``__import__`` of
a ``service`` module in ``service/``, those inside functions too; only the body of ``if
TYPE_CHECKING:`` and the ``else`` of ``if not TYPE_CHECKING:`` never run and are left out):

* no cycle between modules, none between packages;
* no import of a higher floor (a package may import its own floor and the ones below);
* no import of ``service`` inside a function, except the CLI's lazy imports (its
  sub-commands load only what they run);
* ``service.training`` (fitting and evaluating the text model, the ``[train]`` extra) is
  imported only by the CLI;
* ``store`` and ``notify`` import no ``service.classify`` (incidents reach them as the shapes
  of ``service.incidents``);
* no module over 400 lines.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
MAX_LINES = 400

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
    ("pipeline", "fairshare", "notify"),
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


def type_checking(test: ast.expr) -> bool | None:
    """True for the test of ``if TYPE_CHECKING:`` (its body never runs), False for ``if not
    TYPE_CHECKING:`` (its ``else`` never runs), None for any other test."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = type_checking(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Name | ast.Attribute):
        name = test.id if isinstance(test, ast.Name) else test.attr
        return True if name == "TYPE_CHECKING" else None
    return None


OWN_PACKAGE = "<own package>"  # an import of a module of the importer's own package, by name
UNREAD = "<unread>"  # an import whose target the check cannot read


def dynamic_import(node: ast.AST) -> str | None:
    """The module named by ``importlib.import_module("...")`` or ``__import__("...")``;
    :data:`OWN_PACKAGE` for ``import_module(f"{__package__}.{name}")`` (a package finding its
    own modules), :data:`UNREAD` for any other name computed at run time."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name not in ("import_module", "__import__"):
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    parts = first.values if isinstance(first, ast.JoinedStr) else []
    if (
        len(parts) > 1
        and isinstance(parts[0], ast.FormattedValue)
        and isinstance(parts[0].value, ast.Name)
        and parts[0].value.id == "__package__"
        and isinstance(parts[1], ast.Constant)
        and str(parts[1].value).startswith(".")
    ):
        return OWN_PACKAGE
    return UNREAD


def module_imports(text: str, module: str, is_pkg: bool) -> tuple[set[str], set[str]]:
    """(what ``module`` imports at run time, what it imports inside functions), read from its
    source ``text``: every ``import``, ``importlib.import_module`` and ``__import__`` of a
    ``service`` module, except the body of ``if TYPE_CHECKING:`` and the ``else`` of ``if not
    TYPE_CHECKING:`` (they never run)."""
    runtime: set[str] = set()
    lazy: set[str] = set()

    def found(targets: list[str], in_function: bool) -> None:
        for target in targets:
            if target != module:
                runtime.add(target)
                if in_function:
                    lazy.add(target)

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and (only := type_checking(child.test)) is not None:
                for stmt in child.orelse if only else child.body:  # the branch that runs
                    visit_node(stmt, in_function)
                continue
            visit_node(child, in_function)

    def visit_node(child: ast.AST, in_function: bool) -> None:
        if isinstance(child, ast.Import | ast.ImportFrom):
            found(_targets(child, module, is_pkg), in_function)
            return
        named = dynamic_import(child)
        if named == OWN_PACKAGE:
            package = module if is_pkg else module.rpartition(".")[0]
            found([package], in_function)
        elif named == UNREAD:
            found([UNREAD], in_function)
        elif named is not None and named.split(".")[0] == "service":
            found([t for t in [_resolve(named)] if t], in_function)
        nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        visit(child, in_function or nested)

    visit(ast.parse(text), False)
    return runtime, lazy


def imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module → what it imports at run time, module → what it imports inside functions)."""
    runtime: dict[str, set[str]] = defaultdict(set)
    lazy: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        runtime[module], lazy[module] = module_imports(text, module, path.name == "__init__.py")
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


def test_every_import_names_what_it_imports() -> None:
    """An import by a name computed at run time hides its floor from these checks: only a
    package finding its own modules (``import_module(f"{__package__}.{name}")``) may."""
    assert {src for src, targets in RUNTIME.items() if UNREAD in targets} == set()


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, targets in RUNTIME.items():
        for dst in targets:
            if src != "service" and dst not in ("service", UNREAD) and piece(src) != piece(dst):
                graph[piece(src)].add(piece(dst))
    assert cycles(graph) == []


def upward(runtime: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) where the import climbs to a higher floor."""
    return {
        (src, dst)
        for src, targets in runtime.items()
        for dst in targets
        if src != "service"
        and dst not in ("service", UNREAD)
        and FLOOR[piece(dst)] > FLOOR[piece(src)]
    }


def hidden(lazy: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) where the import runs inside a function, the CLI's excepted."""
    return {
        (src, dst) for src, targets in lazy.items() if piece(src) not in LAZY_OK for dst in targets
    }


def test_no_import_runs_back_up() -> None:
    assert upward(RUNTIME) == set()


def test_no_import_hidden_inside_a_function() -> None:
    assert hidden(LAZY) == set()


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
def test_no_module_is_over_400_lines(module: str) -> None:
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


def planted(text: str, module: str = "service.parse.line") -> tuple[set[str], set[str]]:
    """What the checks read from ``text`` as the source of ``module`` (a floor-1 module)."""
    return module_imports(text, module, False)


@pytest.mark.parametrize(
    "text",
    [
        "from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    from service.api import app\n",
        "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import service.api.app\n",
        "import importlib\napp = importlib.import_module('service.api.app')\n",
        "from importlib import import_module\napp = import_module('service.api.app')\n",
        "app = __import__('service.api.app')\n",
    ],
    ids=["if-not-type-checking", "else-of-type-checking", "importlib", "import_module", "dunder"],
)
def test_the_checks_see_an_upward_import_however_it_is_written(text: str) -> None:
    """A planted climb from ``parse`` to ``api`` is an import that runs, and fails the
    floor check."""
    runtime, lazy = planted(text)
    assert runtime == {"service.api.app"} and lazy == set()
    assert upward({"service.parse.line": runtime}) == {("service.parse.line", "service.api.app")}


@pytest.mark.parametrize(
    "text",
    [
        "def f():\n    import importlib\n    return importlib.import_module('service.records')\n",
        "def f():\n    return __import__('service.records')\n",
        "f = lambda: __import__('service.records')\n",
        "def f(TYPE_CHECKING):\n    if not TYPE_CHECKING:\n        import service.records\n",
    ],
    ids=["importlib", "dunder", "lambda", "if-not-type-checking"],
)
def test_the_checks_see_an_import_hidden_in_a_function(text: str) -> None:
    runtime, lazy = planted(text)
    assert lazy == runtime == {"service.records"}
    assert hidden({"service.parse.line": lazy}) == {("service.parse.line", "service.records")}


@pytest.mark.parametrize(
    ("text", "module", "read"),
    [
        (
            "import importlib\nm = importlib.import_module(f'{__package__}.x')\n",
            "service.classify.judgements.registry",
            {"service.classify.judgements"},
        ),
        ("import importlib\nm = importlib.import_module(NAME)\n", "service.parse.line", {UNREAD}),
        ("m = __import__('service.' + name)\n", "service.parse.line", {UNREAD}),
        (
            "import importlib\nm = importlib.import_module(f'{x}.y')\n",
            "service.parse.line",
            {UNREAD},
        ),
    ],
    ids=["own-package", "computed", "concatenated", "other-f-string"],
)
def test_an_import_by_a_computed_name_is_read_as_its_own_package_or_unread(
    text: str, module: str, read: set[str]
) -> None:
    runtime, _ = planted(text, module)
    assert runtime == read


def test_only_what_never_runs_is_left_out() -> None:
    """The body of ``if TYPE_CHECKING:`` and the ``else`` of ``if not TYPE_CHECKING:`` are
    for the type checker; every other branch runs."""
    text = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from service.api import app\nelse:\n    import service.records\n"
        "if not TYPE_CHECKING:\n    import service.labels\nelse:\n    import service.ui\n"
        "if DEBUG:\n    import service.config\nelse:\n    import service.taxonomy\n"
    )
    runtime, _ = planted(text)
    assert runtime == {"service.records", "service.labels", "service.config", "service.taxonomy"}
