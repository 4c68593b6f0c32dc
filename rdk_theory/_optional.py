"""Messages for an optional dependency that cannot be used (matplotlib, the ``plot`` extra;
torch, transformers, gguf for the real models)."""
from __future__ import annotations

import importlib
import importlib.util


def import_failure(exc: BaseException, module: str = "matplotlib", extra: str = "plot") -> str:
    """Why ``module`` could not be used, from the ``ImportError`` its import raised.

    Absent (no package ``module`` at all; importing any of its submodules then fails on the
    package's own name): say so with the pip command. Present but failing (a submodule or one
    of its own dependencies missing, or built for another numpy, say): give the error itself,
    since installing the extra again would not be the fix.
    """
    if _absent(exc, module):
        return f"{module} is not installed (pip install 'rdk-theory[{extra}]')"
    return f"{module} could not be imported: {exc}"


def _absent(exc: BaseException, module: str) -> bool:
    return isinstance(exc, ModuleNotFoundError) and exc.name == module  # not a submodule of it


def missing_modules(needs) -> str | None:
    """Why the modules of ``needs`` (``(module, extra)`` pairs: the extra of rdk-theory that
    provides each) cannot all be used, as one line; None when every one imports.

    The absent ones (no module of that name to import: found without importing anything) are
    named together with one pip command for their extras: ``torch and transformers are not
    installed (pip install 'rdk-theory[torch,models]')``. When none is absent, each is
    imported (one already imported costs nothing): one present but failing is named with its
    own error (see :func:`import_failure`). Nothing is imported while one is absent (it would
    be wasted, and transformers without torch prints a warning of its own as it imports).
    """
    absent = [(m, e) for m, e in needs if _find_spec(m) is None]
    if absent:
        names = [m for m, _ in absent]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        extras = ",".join(dict.fromkeys(e for _, e in absent))
        return (f"{listed} {'is' if len(names) == 1 else 'are'} not installed "
                f"(pip install 'rdk-theory[{extras}]')")
    broken = []
    for module, extra in needs:
        try:
            importlib.import_module(module)
        except Exception as exc:  # an ImportError, or a broken build's own error (an OSError)
            broken.append(import_failure(exc, module, extra))
    return "; ".join(broken) or None


def _find_spec(module: str):
    """``importlib.util.find_spec(module)``: None when there is no such module (or a None in
    ``sys.modules`` blocks it); a spec, or True where the lookup itself fails (the import
    then says why)."""
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a module in sys.modules without __spec__, say
        return True
