"""The package's imports run one way: no module imports a module of a higher layer.

The layers, bottom to top (a module may import its own layer and those below):

==  ============  ==========================================================
0   core          linear algebra, sampling, data (``linalg``, ...)
1   algorithms    each algorithm's math (``gssbo/``, ``goucb/``, ``bbkb/``)
2   models        the BoTorch models (``models/``)
3   decisions     acquisition functions, generation, optimizers
4   loops         optimization loops (``loops/``, demo)
5   ax            the Ax glue (``ax/``)
6   package       ``botorch_sketch/__init__.py``
==  ============  ==========================================================

Every ``import`` statement counts, including those inside functions and under
``TYPE_CHECKING``: a deferred import hides a cycle, it does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "botorch_sketch"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# (layer, patterns): ``name`` matches that module only, ``name.*`` its submodules.
# The longest matching pattern decides a module's layer.
LAYERS: list[tuple[str, list[str]]] = [
    ("core", ["linalg", "incremental_nystrom", "datasets"]),
    ("algorithms", ["gssbo", "gssbo.*", "goucb", "goucb.*", "bbkb", "bbkb.*"]),
    ("models", ["models", "models.*"]),
    (
        "decisions",
        [
            "acquisition",
            "acquisition.*",
            "generation",
            "generation.*",
            "optim",
            "optim.*",
            "trust_region",
            "trust_region.*",
        ],
    ),
    ("loops", ["loops", "loops.*", "demo"]),
    ("ax", ["ax", "ax.*"]),
    ("package", [""]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of ``module`` (a ``botorch_sketch`` module name)."""
    rel = module[len(PACKAGE) + 1 :] if module != PACKAGE else ""
    best, best_len = None, -1
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if pattern.endswith(".*"):
                stem = pattern[:-2]
                hit = rel.startswith(stem + ".")
            else:
                stem = pattern
                hit = rel == stem
            if hit and len(stem) > best_len:
                best, best_len = index, len(stem)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS.")
    return best


def is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``botorch_sketch`` module that ``path`` imports."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + [base])
                base = base.rstrip(".")
            # ``from pkg import mod`` imports the module ``pkg.mod``.
            names = [
                f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base
                for alias in node.names
            ]
        else:
            continue
        found += [
            (node.lineno, name)
            for name in names
            if name == PACKAGE or name.startswith(PACKAGE + ".")
        ]
    return found


MODULES = sorted(ROOT.rglob("*.py"))


def test_every_module_has_a_layer():
    for path in MODULES:
        layer_of(module_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_import_from_a_higher_layer(path):
    here = module_name(path)
    mine = layer_of(here)
    bad = [
        f"{path.relative_to(ROOT.parent)}:{line} ({LAYERS[mine][0]}) imports "
        f"{name} ({LAYERS[layer_of(name)][0]})"
        for line, name in imported_modules(path)
        if layer_of(name) > mine
    ]
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)
