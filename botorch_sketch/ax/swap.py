r"""Put one of our functions in place of an Ax module function inside ``with`` blocks.

Some of Ax 1.3's per-call work grows with the whole experiment at every
generation call (which metrics each trial has data for, the data frames the
adapter builds). Where the package has an equal, faster function it replaces
Ax's module attribute for the duration of its own generation calls only. A
:class:`ModuleSwap` does that re-entrantly and thread-safely: the first block
opened (in any thread) installs the replacement, the last one closed puts back
whatever the module held before, also when the block raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

__all__ = ["ModuleSwap"]


class ModuleSwap:
    r"""A re-entrant, thread-safe replacement of ``module.name``.

    Args:
        module: The module whose attribute is replaced (e.g. ``ax.core.utils``).
        name: The attribute's name; it must exist.
        replacement: Returns the function to install; called when the first block
            opens, so that a monkeypatched replacement (tests) is the one used.
    """

    def __init__(
        self, module: ModuleType, name: str, replacement: Callable[[], Any]
    ) -> None:
        if not hasattr(module, name):
            raise AttributeError(f"{module.__name__} has no attribute {name!r}.")
        self.module = module
        self.name = name
        self.replacement = replacement
        self._lock = threading.Lock()
        self._depth = 0
        self._replaced: Any = None

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._replaced = getattr(self.module, self.name)
                setattr(self.module, self.name, self.replacement())
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    setattr(self.module, self.name, self._replaced)
                    self._replaced = None
