"""Registry of the statement checks, in the order of MATH.md section 6."""
from __future__ import annotations

import importlib

from rdk_theory.validation import InputError

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

    if ids is None:
        ids = list(STATEMENTS)
    elif isinstance(ids, str):  # 'O1' ran as 'O' and '1'
        raise InputError(f"ids must be a list of statement ids, got the string {ids!r} (write "
                         f"[{ids!r}])")
    else:
        ids = list(ids)
        if not ids:  # [] ran every statement, as None does
            raise InputError("ids names no statement: give None for all of them")
        unknown = [sid for sid in ids if not isinstance(sid, str) or sid not in STATEMENTS]
        if unknown:
            raise InputError(f"unknown statement {unknown[0]!r}; known: {', '.join(STATEMENTS)}")
    return [module(sid).check() for sid in progress(ids, desc="statements", total=len(ids))]
