"""No module reads another module's private names, and no module imports in a circle.

Private names (a leading underscore, not dunder) are an implementation detail of
the module that defines them. Two static checks over the package's source:

- no ``from botorch_sketch.x import _name`` (nor ``import`` of a private module
  path) from a different module;
- no ``obj._name`` with ``obj`` other than ``self`` / ``cls`` / ``super()`` in a
  module other than the one that defines ``_name`` (defined: assigned as
  ``self._name`` / ``cls._name``, or a ``def`` / class attribute of that name).

and one over imports: the graph of module-level imports between the package's
modules (``TYPE_CHECKING`` imports included) has no cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "botorch_sketch"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), filename=str(path))
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if _is_private(node.name):
                names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                if _is_private(node.attr):
                    names.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("register_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and _is_private(node.args[0].value)
        ):  # register_buffer("_name", ...) and the like
            names.add(node.args[0].value)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if _is_private(node.id):
                names.add(node.id)
    return names


def _is_own_object(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
    )


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + 1] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def test_no_module_imports_another_modules_private_names() -> None:
    offences = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(name, node)
                if not source.startswith("botorch_sketch") or source == name:
                    continue
                for alias in node.names:
                    if _is_private(alias.name) or any(
                        _is_private(p) for p in source.split(".")
                    ):
                        offences.append(f"{name}: from {source} import {alias.name}")
    assert not offences, "\n".join(offences)


def test_no_module_reads_another_modules_private_attributes() -> None:
    modules = _modules()
    owners: dict[str, set[str]] = defaultdict(set)
    for name, tree in modules.items():
        for attr in _defined_private_names(tree):
            owners[attr].add(name)
    offences = []
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            if _is_own_object(node.value):
                continue
            defined_in = owners.get(node.attr)
            if defined_in and name not in defined_in:
                offences.append(
                    f"{name}:{node.lineno}: ._{node.attr.lstrip('_')} "
                    f"(private to {', '.join(sorted(defined_in))})"
                )
    assert not offences, "\n".join(offences)


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                source = _resolve(name, node)
                targets = [source] + [f"{source}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    # A package's __init__ importing its own submodules is not a
                    # cycle with them.
                    if target.startswith(name + ".") or name.startswith(target + "."):
                        continue
                    graph[name].add(target)
    return graph


def test_no_import_cycle_between_modules() -> None:
    graph = _import_graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
