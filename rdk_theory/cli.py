"""The ``rdk-theory`` command line.

Core sub-commands (``acceptance``, ``sample``, ``report``) live in the core. The packages built
on it contribute more through the entry-point group ``rdk_theory.commands``: each entry point is
a callable ``register(subparsers)`` that adds one sub-parser and sets ``func`` on it; ``func(args)``
returns the exit status. The core never imports those packages by name.

Bad input anywhere raises :class:`rdk_theory.validation.InputError`; ``main`` prints it as one
line ``error: ...`` on stderr and exits with status 2 (no traceback).
"""
from __future__ import annotations

import argparse
import os
import re
import select
import sys
from importlib.metadata import entry_points

from .validation import InputError, type_name

EXIT_BAD_INPUT = 2


#: Every character :meth:`str.splitlines` breaks a line at, and how :func:`_one_line` writes it.
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in
                              "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def _one_line(message: str) -> str:
    """``message`` on one line: a line break inside it (a file name may hold one: ``\\n``,
    a vertical tab, U+2028, ...) is written as its escape, so that stderr is always the one
    ``error: ...`` line of the contract."""
    return message.translate(_LINE_BREAKS)


#: What a negative number looks like on the command line: argparse's own pattern takes only
#: ``-1`` and ``-0.5``, so ``--tau -1e-3`` and ``--lam -inf`` were "expected one argument"
#: instead of the value's own error.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$",
                              re.IGNORECASE)


class _SubCommands(argparse._SubParsersAction):
    """Sub-commands whose unknown arguments are their own usage error: argparse hands them
    up to the top-level parser, whose message named 'rdk-theory' and its --help instead of
    the sub-command's."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        extras = getattr(namespace, _UNRECOGNIZED, None)
        if extras:
            self._name_parser_map[values[0]].error(
                f"unrecognized arguments: {' '.join(extras)}")


#: Where argparse keeps a sub-command's unknown arguments on the namespace.
_UNRECOGNIZED = getattr(argparse, "_UNRECOGNIZED_ARGS_ATTR", "_unrecognized_args")


class _Parser(argparse.ArgumentParser):
    """Usage errors in the same one-line form as bad input: ``error: ...``, exit status 2;
    negative numbers in any float notation are values, not options. Options are spelled out:
    an abbreviation (``--ker`` for ``--kernel``) would stop working, or change its meaning,
    the day an option sharing its prefix is added, and other tools depend on this CLI."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER
        self.register("action", "parsers", _SubCommands)

    def error(self, message):
        self.exit(EXIT_BAD_INPUT, _one_line(f"error: {self.prog}: {message} (see '{self.prog} "
                                            "--help')") + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rdk-theory",
        description=(
            "Acceptance calculators, lossless samplers, proofs-as-code and validation for "
            "speculative sampling with pruned or mismatched drafter vocabularies "
            "(vanilla, TLI, exact RDK, first-order RDK)."
        ),
        epilog="Run 'rdk-theory COMMAND --help' for the options and an example of each command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import commands  # the core's own sub-commands

    commands.register_all(sub)
    for ep in sorted(entry_points(group="rdk_theory.commands"), key=lambda e: e.name):
        try:
            register = ep.load()
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not stop the others
            # an ImportError: its optional dependencies are missing; anything else (a stale
            # entry point's AttributeError, an error raised by the plugin's own import) used
            # to kill every command, the core's included: named with its type
            why = exc if isinstance(exc, ImportError) else f"{type_name(exc)}: {exc}"
            print(_one_line(f"warning: command '{ep.name}' unavailable: {why}"), file=sys.stderr)
            continue
        register(sub)
    parser.set_defaults(command_names=tuple(sub.choices))  # named when no COMMAND is given
    return parser


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), stdout not a file
        return False


def usable_streams() -> None:
    """A closed stdout or stderr (``>&-``, ``2>&-``, pythonw) is replaced by the null device.
    Python sets a closed one to None, and ``print(..., file=None)`` writes to stdout: with
    stderr closed, warnings and ``error:`` lines went into ``--json``'s stdout."""
    if sys.stdout is None:  # --json writes nowhere, as print() does in text mode
        sys.stdout = open(os.devnull, "w", errors="backslashreplace")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    usable_streams()  # before the parser: a plugin's warning is printed while it is built
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        names = ", ".join(args.command_names)
        print(f"error: rdk-theory: a COMMAND is required, one of: {names} (see 'rdk-theory "
              "--help')", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run_command(args.func, args)


#: How numpy refuses an array whose size or byte count exceeds what it can index (e.g.
#: ``simulate block --mc 1e19``): sizes the options allow, like a MemoryError, not a bug.
_NUMPY_SIZE_ERRORS = ("Maximum allowed dimension exceeded", "array is too big")


def run_command(func, args) -> int:
    """``func(args)`` as a command's exit status; bad input, a missing file, an OS error (a
    folder that cannot be written) or a MemoryError becomes one ``error: ...`` line on stderr
    and exit status 2 (so does numpy's refusal of an array too large to index), an interrupt
    exit status 130, a reader leaving the pipe early 0."""
    usable_streams()
    if hasattr(sys.stdout, "reconfigure"):  # a file name that is not UTF-8 (surrogates) is
        sys.stdout.reconfigure(errors="backslashreplace")  # printed escaped, as on stderr
    try:
        return int(func(args) or 0)
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # the reader of stdout left early (``... --json | head``): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit-time flush does not fail too
        return 0
    except InputError as exc:
        print(_one_line(f"error: {exc}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except FileNotFoundError as exc:
        print(_one_line(f"error: file not found: {exc.filename or exc}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # e.g. --out under a file, a folder without write permission
        where = f": {exc.filename}" if exc.filename else ""
        print(_one_line(f"error: {exc.strerror or exc}{where}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError as exc:  # sizes the options allow but this machine cannot hold
        print(_one_line(f"error: out of memory ({str(exc) or 'no detail'}): choose smaller sizes"),
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:
        if not str(exc).startswith(_NUMPY_SIZE_ERRORS):
            raise  # a bug, with its traceback
        print(_one_line(f"error: an array too large for numpy ({exc}): choose smaller sizes"),
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
