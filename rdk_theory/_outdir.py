"""The ``--out`` folder of a command: made before any work, removed again if the run fails.

Shared by ``rdk-theory report`` and ``rdk-theory validate``: a folder that cannot be made or
written is an error before the work (not after it, with the results lost), and a run that
fails leaves no empty folder of its own behind. Folders that existed before the run, and
folders that hold files, are never removed.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

from .validation import InputError


def make_out_folder(out: str) -> list:
    """Make ``--out`` (and missing parents) before any work, so that a folder that cannot be
    made or written is an error now, not after the run; returns the folders it made,
    outermost first, for :func:`remove_empty` to remove if the run then fails."""
    if not out:  # abspath('') is the working folder, which makedirs('') cannot make
        raise InputError("--out must name a folder, got an empty string")
    ancestor, made = os.path.abspath(out), []
    while not os.path.lexists(ancestor):  # a broken link exists, as a link: makedirs fails there
        made.insert(0, ancestor)
        ancestor = os.path.dirname(ancestor)
    if not os.path.exists(ancestor):  # a symbolic link to nothing
        what = "is" if not made else f"lies under {ancestor},"
        raise InputError(f"--out {out} {what} a broken symbolic link (to {os.readlink(ancestor)})")
    if not os.path.isdir(ancestor):
        what = "exists and is not a directory" if not made else f"lies under a file, {ancestor}"
        raise InputError(f"--out {out} {what}")
    os.makedirs(out, exist_ok=True)
    if not os.access(out, os.W_OK):
        remove_empty(made)
        raise InputError(f"--out {out} is not writable")
    return made


def remove_empty(made: list) -> None:
    """Remove the folders :func:`make_out_folder` made, innermost first, while they are empty."""
    for folder in reversed(made):
        try:
            os.rmdir(folder)  # only if still empty
        except OSError:
            return


@contextmanager
def out_folder(out: str):
    """``with out_folder(out):`` makes ``out`` first and, if the body raises, removes the
    folders made here that are still empty (files already written are kept)."""
    made = make_out_folder(out)
    try:
        yield
    except BaseException:
        remove_empty(made)
        raise


def check_targets(out: str, names) -> None:
    """InputError now, before the work, when a file the run will write in ``out`` is a folder
    (it would fail only at the end, with the results computed)."""
    for name in names:
        if os.path.isdir(os.path.join(out, name)):
            raise InputError(f"--out {out}: {name} is a folder; the run writes a file there")


def check_writable(path: str, given: str) -> None:
    """argparse.ArgumentTypeError unless ``path`` can be written: its folder exists, and the
    file (when it exists) or else its folder is writable. ``given`` is the text the user
    typed, named when the folder is missing."""
    import argparse

    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{given!r}: the folder {folder!r} does not exist "
                                         "or is not a folder")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path!r} cannot be written (no write permission)")


def writable_file(text: str) -> str:
    """An argparse type for a file written at the end of a long run (a benchmark's ``--json``):
    a path that names a folder, lies in a folder that does not exist, or cannot be written
    is a usage error before the work, not a traceback after it with the results lost."""
    import argparse

    if not os.path.basename(text) or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} names no file (e.g. results.json)")
    check_writable(text, text)
    return text


def write_replacing(path: str, write) -> None:
    """``write(tmp)`` into a new file beside ``path``, then rename it onto ``path``: a write
    that fails part-way (a full disk, a figure that cannot be drawn) leaves the previous
    ``path`` as it was, and no partial file. The temporary name keeps ``path``'s suffix, which
    matplotlib reads the format from. The file gets the mode a plain ``open`` would give
    (``0666`` less the umask; ``mkstemp`` makes it ``0600``). A symbolic link at ``path`` is
    replaced by the file, not written through."""
    import tempfile

    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=os.path.splitext(name)[1],
                               dir=folder or ".")
    os.close(fd)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
