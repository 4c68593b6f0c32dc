"""Progress bars: tqdm when installed and stderr is a terminal (or forced), silent otherwise."""
from __future__ import annotations

import os
import sys


def wanted(enabled: bool | None = None) -> bool:
    """Whether to draw a bar: ``enabled`` when given, else when stderr is a terminal or
    ``RDK_THEORY_PROGRESS=1``; never without a stderr (pythonw, some embedded hosts)."""
    if sys.stderr is None:
        return False
    if enabled is None:
        return sys.stderr.isatty() or os.environ.get("RDK_THEORY_PROGRESS") == "1"
    return bool(enabled)


def progress(iterable, *, desc: str = "", total: int | None = None, enabled: bool | None = None):
    if not wanted(enabled):
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm ships with the plot extra
        return iterable
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, leave=False)
