"""The repository's top-level folders are one package, ``warrant``.

``runner/``, ``tools/``, ``broker/`` and ``ledger/`` sit at the top of the repository and are
linked into ``warrant/``. From the repository root (where pytest, make and ``python -m bench``
run) a bare ``import runner`` would otherwise load a second copy of every module beside
``warrant.runner.*``: its own error classes (an error from it escapes
``except warrant.WarrantError``), its own settings, its own registries. Each folder's
``__init__`` calls :func:`only_as_warrant`, so that import fails at once and says what to write.
"""

from __future__ import annotations

__all__ = ["only_as_warrant"]


def only_as_warrant(module_name: str, folder: str) -> None:
    """Refuse to load ``folder`` under any name but ``warrant.<folder>``."""
    if module_name != f"warrant.{folder}":
        raise ImportError(
            f"import warrant.{folder}, not {module_name}: the repository's folders runner/, "
            "tools/, broker/ and ledger/ are the package warrant (a second copy would have its "
            "own error classes, settings and registries)",
            name=module_name,
        )
