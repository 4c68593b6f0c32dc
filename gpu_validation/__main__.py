"""``python -m gpu_validation run [...]``: the validation harness (same as ``rdk-theory validate``)."""
from __future__ import annotations

import argparse
import sys

from rdk_theory.cli import run_command

from .cli import VALIDATE_EPILOG, add_run_arguments, cmd_models, cmd_validate, register_models


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_validation",
                                     description="Real-model validation of rdk_theory.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run the validation", epilog=VALIDATE_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(run)
    run.set_defaults(func=cmd_validate)
    register_models(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run_command(args.func, args)  # errors as `rdk-theory validate` reports them


if __name__ == "__main__":
    sys.exit(main())
