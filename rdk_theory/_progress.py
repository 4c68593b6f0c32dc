"""Progress bars: tqdm when installed and stderr is a terminal (or forced), silent otherwise."""
from __future__ import annotations

import os
import sys


def progress(iterable, *, desc: str = "", total: int | None = None, enabled: bool | None = None):
    if sys.stderr is None:  # pythonw and some embedded hosts: nowhere to draw a bar
        return iterable
    if enabled is None:
        enabled = sys.stderr.isatty() or os.environ.get("RDK_THEORY_PROGRESS") == "1"
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm ships with the plot extra
        return iterable
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, leave=False)
