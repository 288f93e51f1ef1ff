"""The model modules' structure: no import cycle, no reads of others' private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[2] / "botorch_sketch" / "models"
PREFIX = "botorch_sketch.models."

#: Modules whose code reads other objects only through public names.
PUBLIC_ONLY = [
    "budget.py",
    "dictionary_policy.py",
    "fit_options.py",
    "model_state.py",
    "nystrom_dictionary.py",
    "nystrom_fit.py",
    "nystrom_inputs.py",
    "sketch_state.py",
]

#: Private-looking names that are public APIs (NamedTuple methods).
ALLOWED = {"_replace", "_asdict", "_fields"}


def imports_of(path: Path) -> set[str]:
    """Every ``botorch_sketch.models.*`` module ``path`` imports (all statements)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(n[len(PREFIX) :] for n in names if n.startswith(PREFIX))
    return found


def test_no_import_cycle_between_model_modules():
    graph = {p.stem: imports_of(p) for p in MODELS.glob("*.py")}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(trail + [nxt])}")
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("name", PUBLIC_ONLY)
def test_no_private_reads_of_other_objects(name):
    tree = ast.parse((MODELS / name).read_text())
    bad = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in ALLOWED
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            bad.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "botorch_sketch"
        ):
            bad += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.startswith("_")
            ]
    assert not bad, f"{name} reads private names: {bad}"
