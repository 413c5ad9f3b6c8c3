"""A package's names imported on first use (PEP 562 `__getattr__`), for packages whose names pull in heavy
libraries (catalogs, delta-rs, pyiceberg's FileIO) that many importers never need."""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_getattr(package: str, names: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The package's `__getattr__`: `names` maps a name to the module (relative to `package`) that defines it; the
    value is kept in `namespace` (the package's globals) once imported."""

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(import_module(names[name], package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
