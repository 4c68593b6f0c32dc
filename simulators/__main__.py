"""``python -m simulators SIMULATOR ...``: the same run as ``rdk-theory simulate SIMULATOR ...``.

Help, usage lines and errors name the documented command, ``rdk-theory simulate``.
"""
from __future__ import annotations

import sys

from rdk_theory.cli import main as rdk_theory_main


def main(argv=None) -> int:
    return rdk_theory_main(["simulate", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
