"""Messages for an optional dependency that cannot be used (matplotlib, the ``plot`` extra)."""
from __future__ import annotations


def import_failure(exc: ImportError, module: str = "matplotlib", extra: str = "plot") -> str:
    """Why ``module`` could not be used, from the ``ImportError`` its import raised.

    Absent (no package ``module`` at all; importing any of its submodules then fails on the
    package's own name): say so with the pip command. Present but failing (a submodule or one
    of its own dependencies missing, or built for another numpy, say): give the error itself,
    since installing the extra again would not be the fix.
    """
    if isinstance(exc, ModuleNotFoundError) and exc.name == module:  # not a submodule of it
        return f"{module} is not installed (pip install 'rdk-theory[{extra}]')"
    return f"{module} could not be imported: {exc}"
