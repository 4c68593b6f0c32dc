"""Registry of the statement checks, in the order of MATH.md section 6."""
from __future__ import annotations

import importlib

#: statement id -> module name inside ``proofs``.
STATEMENTS = {
    "L": "lossless",
    "A": "acceptance_tv",
    "O1": "tli_vs_vanilla",
    "O2": "oov_cap",
    "O3": "identity_kernel",
    "O4": "mass_transfer",
    "O5": "first_order_gain",
    "E": "first_order_error",
    "B": "block_efficiency",
    "S": "string_level",
    "K": "multidraft",
}


def module(sid: str):
    """The proof module of statement ``sid``."""
    if sid not in STATEMENTS:
        raise KeyError(f"unknown statement {sid!r}; known: {', '.join(STATEMENTS)}")
    return importlib.import_module(f"proofs.{STATEMENTS[sid]}")


def run_all(ids=None):
    """Run ``check()`` of each statement (all by default); returns a list of CheckResult.
    On a terminal a bar counts the statements (a whole run is 12-30 s)."""
    from rdk_theory._progress import progress

    ids = list(ids or STATEMENTS)
    return [module(sid).check() for sid in progress(ids, desc="statements", total=len(ids))]
