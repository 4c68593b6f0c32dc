"""``python -m gpu_validation run [...]``: the validation harness (same as ``rdk-theory validate``)."""
from __future__ import annotations

import argparse
import sys

from rdk_theory.cli import EXIT_BAD_INPUT, _Parser, run_command, usable_streams

from .cli import VALIDATE_EPILOG, add_run_arguments, cmd_validate, register_models

PROG = "python -m gpu_validation"


def main(argv=None) -> int:
    usable_streams()  # a closed stderr: the COMMAND error below went to stdout
    # usage errors in rdk-theory's one-line form: "error: ...", exit status 2
    parser = _Parser(prog=PROG, description="Real-model validation of rdk_theory.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run = sub.add_parser("run", help="run the validation", epilog=VALIDATE_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(run)
    run.set_defaults(func=cmd_validate)
    register_models(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        print(f"error: {PROG}: a COMMAND is required, one of: {', '.join(sub.choices)} "
              f"(see '{PROG} --help')", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run_command(args.func, args)  # errors as `rdk-theory validate` reports them


if __name__ == "__main__":
    sys.exit(main())
