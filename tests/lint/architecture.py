"""Architecture counts: the figures issue notes quote, measured from the source.

    python -m tests.lint.architecture [--json]

Prints upward imports (a module importing one from a higher layer; see ``LAYERS``), import
cycles, the sites that commit a run's status change, SQL statements outside ``ledger/``, and
the largest modules and functions. ``tests/test_architecture.py`` pins the first four at zero
(or at the one allowed site) and the size limits.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runner", "tools", "broker", "ledger")
#: Packages that live in ``warrant/`` itself (not links to a top folder), checked as the four.
OWN_PACKAGES = ("contrib",)

#: Layers, lowest first. A module may import its own layer and those below it, never above.
#: The layers are declared next to the code they govern: each package's ``__init__.py`` says
#: ``__layer__ = "..."`` for its modules and sub-packages, and a module whose layer differs
#: from its package's says its own (``runner/codes.py``, ``tools/_contract.py``, ...).
LAYERS: tuple[str, ...] = (
    "codes and errors",
    "pure core",
    "adapters",
    "broker stages",
    "client, server, CLI and stack",
)
#: Allowed limits: module lines (issue 48: a module may hold one whole rule; the cap only catches
#: a module that grew past any one rule) and function lines (issue 17; longer ones need a reason
#: in ``LONG_FUNCTIONS``).
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60
#: Functions allowed over the limit, with the reason.
LONG_FUNCTIONS: dict[str, str] = {
    "ledger.repo._transition_statement": "builds the one statement of a transition (the "
    "compare-and-set, its events, observation and guarded writes as CTEs): split, the "
    "statement's shape would be spread over several functions that only make sense together",
}

_SQL = re.compile(
    r"(?<![\w.])(?:sa\.|sqlalchemy\.)?(?:select|update|insert|delete|text)\(|"
    r"\b(?:s|conn|session|connection)\.(?:execute|scalars?|get)\("
)
_TRANSITION = re.compile(r"\b(?:transition|cas|commit_transition)\(")


@dataclass(frozen=True)
class Module:
    name: str  # dotted, without the "warrant." prefix
    path: Path
    tree: ast.Module
    lines: int


def modules() -> Iterator[Module]:
    folders = [ROOT / p for p in PACKAGES] + [ROOT / "warrant" / p for p in OWN_PACKAGES]
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(folder.parent).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            text = path.read_text()
            yield Module(".".join(parts), path, ast.parse(text), text.count("\n"))


def declared_layer(tree: ast.Module) -> str | None:
    """The module's own ``__layer__ = "..."``, if it says one (``""`` when ``__layer__`` is
    assigned something other than a string literal: it names no layer, and is reported)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__layer__" for t in node.targets
        ):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
            return ""
    return None


@functools.cache
def declared_layers() -> dict[str, str]:
    """Each module's layer name: its own declaration, else its nearest package's."""
    own = {m.name: declared_layer(m.tree) for m in modules()}
    found: dict[str, str] = {}
    for name in own:
        parts = name.split(".")
        for size in range(len(parts), 0, -1):
            candidate = ".".join(parts[:size])
            if own.get(candidate) is not None:
                found[name] = own[candidate]  # type: ignore[assignment]
                break
    return found


def layer_of(name: str) -> int | None:
    """The layer's index (0 lowest) of a module, or of the module a dotted name is inside."""
    layers = declared_layers()
    while name and name not in layers:
        name = name.rpartition(".")[0]
    layer = layers.get(name)
    return LAYERS.index(layer) if layer in LAYERS else None


def imports(module: Module, *, runtime_only: bool = True) -> set[str]:
    """The warrant modules ``module`` imports (``TYPE_CHECKING`` blocks skipped if asked)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if runtime_only and isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(_strip(alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                # "from pkg import name": an edge to pkg.name when that is a module, else to
                # pkg (graph() keeps the longest name that is a module)
                base = _strip(child.module)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    visit(module.tree)
    return {name for name in found if name and name.split(".")[0] in (*PACKAGES, *OWN_PACKAGES)}


def _strip(name: str) -> str:
    return name[len("warrant.") :] if name.startswith("warrant.") else ""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def graph() -> dict[str, set[str]]:
    mods = {m.name: m for m in modules()}
    edges: dict[str, set[str]] = {}
    for m in mods.values():
        targets = set()
        for name in imports(m):
            # "from pkg import name" names a module or an attribute: keep what is a module
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != m.name and not m.name.startswith(name + "."):
                targets.add(name)
        edges[m.name] = targets
    return edges


def upward_imports() -> list[tuple[str, str]]:
    out = []
    for source, targets in graph().items():
        low = layer_of(source)
        for target in sorted(targets):
            high = layer_of(target)
            if low is not None and high is not None and high > low:
                out.append((source, target))
    return sorted(out)


def unlayered() -> list[str]:
    """Modules that resolve to no layer: neither they nor a package above them declare one
    (the four top-level packages included), or the declaration is not one of :data:`LAYERS`."""
    return sorted(m.name for m in modules() if layer_of(m.name) is None)


def cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def _code_lines(module: Module) -> Iterator[tuple[int, str]]:
    """Source lines outside docstrings and comments."""
    doc_lines: set[int] = set()
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue
        if isinstance(node.value.value, str) and node.end_lineno:
            doc_lines.update(range(node.lineno, node.end_lineno + 1))
    for number, line in enumerate(module.path.read_text().splitlines(), 1):
        stripped = line.split("#", 1)[0]
        if number not in doc_lines and stripped.strip():
            yield number, stripped


def sql_outside_ledger() -> list[str]:
    out = []
    for m in modules():
        if m.name.startswith("ledger"):
            continue
        for number, line in _code_lines(m):
            if _SQL.search(line):
                out.append(f"{m.path.relative_to(ROOT)}:{number}: {line.strip()}")
    return out


#: What the stages call an ORM row they loaded (a write through any of these is counted).
ROW_NAMES = frozenset(
    {"run", "cmd", "command", "outcome", "prior", "row", "grant", "confirmation", "handoff"}
)


def _row_attributes() -> frozenset[str]:
    """Every mapped attribute of the ledger's ORM models."""
    import warrant.ledger.models
    import warrant.ledger.models_api  # noqa: F401
    from warrant.ledger.model_base import Base

    return frozenset(a.key for m in Base.registry.mappers for a in m.attrs)


def _assigned(node: ast.AST) -> Iterator[ast.Attribute]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Tuple | ast.List):
            targets.extend(target.elts)
        elif isinstance(target, ast.Attribute):
            yield target


def orm_writes_outside_ledger() -> list[str]:
    """Attribute writes to a loaded ORM row outside ``ledger/``: ``<row>.<column> = ...``
    where ``<row>`` is one of :data:`ROW_NAMES` (also ``self.outcome.x``, ``a.cmd.x``). The
    ledger owns every write; the stages call its functions."""
    columns = _row_attributes()
    out = []
    for m in modules():
        if m.name.startswith("ledger"):
            continue
        for node in ast.walk(m.tree):
            for target in _assigned(node):
                base = target.value
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if target.attr in columns and name in ROW_NAMES:
                    out.append(f"{m.path.relative_to(ROOT)}:{target.lineno} {name}.{target.attr}")
    return sorted(set(out))


def transition_sites() -> list[str]:
    """Calls that commit a run's status change, outside the module that owns them."""
    out = []
    for m in modules():
        if m.name in ("ledger.repo", "ledger.runs"):
            continue
        for number, line in _code_lines(m):
            if _TRANSITION.search(line) and "def " not in line:
                out.append(f"{m.path.relative_to(ROOT)}:{number}: {line.strip()}")
    return out


def largest_modules(count: int = 5) -> list[tuple[str, int]]:
    sizes = [(str(m.path.relative_to(ROOT)), m.lines) for m in modules()]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def functions() -> list[tuple[str, int]]:
    out = []
    for m in modules():
        for node in ast.walk(m.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
                out.append((f"{m.name}.{node.name}", node.end_lineno - node.lineno + 1))
    return sorted(out, key=lambda item: -item[1])


#: The counts ``--check`` (``make lint``) requires to be zero.
PINNED = (
    "bare_imports",
    "demo_imports",
    "orm_writes_outside_ledger",
    "upward_imports",
    "unlayered_modules",
    "cycles",
    "transition_sites",
    "sql_outside_ledger",
    "modules_over_limit",
    "functions_over_limit",
    "unexplained_function_imports",
)


def bare_imports() -> list[str]:
    """Project files that import ``runner`` (``tools``, ``broker``, ``ledger``) without the
    ``warrant.`` prefix: at run time that import fails (``warrant._namespace``); here it is
    named before anything runs."""
    found: list[str] = []
    for folder in (*PACKAGES, "tests", "bench", "examples", "warrant"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                    else []
                )
                for name in names:
                    if name.split(".")[0] in PACKAGES:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def demo_imports() -> list[str]:
    """Product modules importing the demo distribution (``warrant_demo``) other than inside a
    function: the product runs without it (``warrant demo`` imports it when it runs)."""
    found: list[str] = []
    for m in modules():
        in_functions = {
            id(inner)
            for node in ast.walk(m.tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(node)
        }
        for node in ast.walk(m.tree):
            if id(node) in in_functions:
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            found.extend(
                f"{m.path.relative_to(ROOT)}:{node.lineno} {name}"
                for name in names
                if name.partition(".")[0] == "warrant_demo"
            )
    return found


# -- The house's figures (issue 48): what a newcomer walks through. -----------------------------

#: Inside the product packages but not the product: the demo plug-in, were it back there (it is
#: the demo distribution, ``examples/demo_plugin``: ``demo_in_product`` stays empty).
DEMO_PREFIXES = ("tools.demo", "runner.stack.scenarios", "runner.stack.demo")
#: A "small" module, for the count of small modules with a single importer.
SMALL_MODULE_LINES = 80


def _product_modules() -> list[Module]:
    return [m for m in modules() if not m.name.startswith(DEMO_PREFIXES)]


def product_lines() -> int:
    """Lines of runner, broker, ledger, tools and warrant/ (migrations and the demo apart)."""
    own = sum(m.lines for m in _product_modules())
    rest = (ROOT / "warrant").glob("*.py")  # warrant/contrib/ is counted in modules()
    return own + sum(p.read_text().count("\n") for p in rest)


def _is_warrant(name: str) -> bool:
    """``warrant`` or one of its modules (not ``warrant_demo``, another distribution)."""
    return name == "warrant" or name.startswith("warrant.")


def function_imports() -> list[str]:
    """Imports of the project's own modules made inside a function (``TYPE_CHECKING`` apart)."""
    found: list[str] = []
    for m in _product_modules():
        for node in ast.walk(m.tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (
                    inner.level or _is_warrant(inner.module or "")
                ):
                    found.append(f"{m.name}:{inner.lineno} {inner.module}")
                elif isinstance(inner, ast.Import) and any(
                    _is_warrant(a.name) for a in inner.names
                ):
                    found.append(f"{m.name}:{inner.lineno}")
    return sorted(set(found))


#: The comment a function-level import of the project's own modules carries (issue 48): the
#: measured start-up cost or the optional dependency that keeps it out of the module's top.
LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


def unexplained_function_imports() -> list[str]:
    """Function-level imports of the project's own modules without a ``# lazy: <reason>``
    comment on the import's line (on one of its lines, when the import spans several), in the
    product's modules."""
    found: list[str] = []
    for m in _product_modules():
        lines = m.path.read_text().splitlines()
        for node in ast.walk(m.tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                own = (
                    isinstance(inner, ast.ImportFrom)
                    and (inner.level or (inner.module or "").startswith("warrant"))
                ) or (
                    isinstance(inner, ast.Import)
                    and any(a.name.startswith("warrant") for a in inner.names)
                )
                if not own:
                    continue
                span = lines[inner.lineno - 1 : (inner.end_lineno or inner.lineno)]
                if not any(LAZY_REASON.search(line) for line in span):
                    found.append(f"{m.path.relative_to(ROOT)}:{inner.lineno}")
    return sorted(set(found))


def importers() -> dict[str, set[str]]:
    """Each product module's importers among the product's modules (``TYPE_CHECKING`` too)."""
    mods = {m.name: m for m in modules()}
    found: dict[str, set[str]] = {name: set() for name in mods}
    for m in mods.values():
        for name in imports(m):
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != m.name and not m.name.startswith(name + "."):
                found[name].add(m.name)
    return found


def small_single_importer() -> list[str]:
    """Modules of at most ``SMALL_MODULE_LINES`` lines that exactly one module imports."""
    sizes = {m.name: m for m in _product_modules()}
    return sorted(
        f"{name} ({sizes[name].lines} lines, from {next(iter(users))})"
        for name, users in importers().items()
        if name in sizes
        and sizes[name].path.name != "__init__.py"
        and sizes[name].lines <= SMALL_MODULE_LINES
        and len(users) == 1
    )


def house() -> dict[str, object]:
    product = _product_modules()
    return {
        "product_lines": product_lines(),
        "modules": len(product),
        "private_modules": sum(
            1
            for m in product
            if any(p.startswith("_") and p != "__init__" for p in m.name.split("."))
        ),
        "function_imports": function_imports(),
        "small_single_importer": small_single_importer(),
        "modules_350_to_400_lines": sorted(m.name for m in product if 350 <= m.lines <= 400),
        "demo_in_product": sorted(m.name for m in modules() if m.name.startswith(DEMO_PREFIXES)),
        "stage_imports": {
            name: len(graph().get(name, ()))
            for name in ("broker.policy.stage", "broker.planner.stage", "broker.tool.stage")
        },
    }


def report() -> dict[str, object]:
    return {
        "bare_imports": bare_imports(),
        "demo_imports": demo_imports(),
        "upward_imports": [f"{a} -> {b}" for a, b in upward_imports()],
        "unlayered_modules": unlayered(),
        "cycles": cycles(),
        "transition_sites": transition_sites(),
        "sql_outside_ledger": sql_outside_ledger(),
        "orm_writes_outside_ledger": orm_writes_outside_ledger(),
        "largest_modules": largest_modules(),
        "largest_functions": functions()[:5],
        "modules_over_limit": [m for m in largest_modules(1000) if m[1] > MAX_MODULE_LINES],
        "functions_over_limit": [
            f for f in functions() if f[1] > MAX_FUNCTION_LINES and f[0] not in LONG_FUNCTIONS
        ],
        "unexplained_function_imports": unexplained_function_imports(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--house", action="store_true", help="the house's figures (issue 48) instead of the rules"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 unless every pinned count is zero"
    )
    args = parser.parse_args(argv)
    data = house() if args.house else report()
    if args.check and not args.house:
        failing = {k: v for k, v in data.items() if k in PINNED and v}
        for key, value in failing.items():
            print(f"{key}: {value}", file=sys.stderr)
        return 1 if failing else 0
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for key, value in data.items():
        if not isinstance(value, list):
            print(f"{key}: {value}")
            continue
        print(f"{key}: {len(value)}")
        for item in value:
            print(f"    {item}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
