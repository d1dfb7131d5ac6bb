"""Names a package exports but imports on first use (PEP 562), so importing the package stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """Return a module ``__getattr__`` that imports each name of ``exports`` from its module on use.

    Args:
        package: The package's ``__name__`` (for the error message).
        exports: Exported name -> the module that defines it.

    Example:
        >>> __getattr__ = lazy_exports("pkg", {"dumps": "json"})
        >>> __getattr__("dumps").__name__
        'dumps'
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
