"""``python -m proofs [--only IDS] [--json]``: the same run as ``rdk-theory prove``."""
from __future__ import annotations

import sys

from rdk_theory.cli import _Parser, run_command

from .cli import PROVE_DESCRIPTION, RAW, add_prove_arguments, prove_epilog

PROG = "python -m proofs"


def main(argv=None) -> int:
    parser = _Parser(prog=PROG, description=PROVE_DESCRIPTION, epilog=prove_epilog(PROG),
                     formatter_class=RAW)
    add_prove_arguments(parser)
    args = parser.parse_args(argv)
    return run_command(args.func, args)  # errors as `rdk-theory prove` reports them


if __name__ == "__main__":
    sys.exit(main())
