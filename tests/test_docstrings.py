"""Every public module, class, function and method of the package has a docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import botorch_sketch


def public_modules():
    yield botorch_sketch
    for info in pkgutil.walk_packages(botorch_sketch.__path__, "botorch_sketch."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield importlib.import_module(info.name)


def public_members(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and (
            obj.__module__ == module.__name__
        ):
            yield f"{module.__name__}.{name}", obj


def own_public_methods(cls):
    for name, attr in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        func = attr.fget if isinstance(attr, property) else attr
        if isinstance(func, classmethod | staticmethod):
            func = func.__func__
        if inspect.isfunction(func):
            yield name, func


def inherited_doc(cls, name):
    """A method overriding a documented base method inherits its contract."""
    for base in cls.__mro__[1:]:
        attr = vars(base).get(name)
        if attr is not None:
            func = attr.fget if isinstance(attr, property) else attr
            if getattr(func, "__doc__", None):
                return True
    return False


def test_every_public_object_is_documented():
    missing = []
    for module in public_modules():
        if not (module.__doc__ or "").strip():
            missing.append(module.__name__)
        for qualname, obj in public_members(module):
            if not (obj.__doc__ or "").strip():
                missing.append(qualname)
            if inspect.isclass(obj):
                for name, func in own_public_methods(obj):
                    if name == "__init__" and (obj.__doc__ or "").strip():
                        continue  # documented on the class
                    if not (func.__doc__ or "").strip() and not inherited_doc(
                        obj, name
                    ):
                        missing.append(f"{qualname}.{name}")
    assert not missing, "missing docstrings:\n" + "\n".join(sorted(set(missing)))
