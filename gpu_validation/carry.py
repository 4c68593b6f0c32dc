"""Split a file into numbered chunks with a SHA-256 manifest, and join them back with a check.

For machines that can receive only a few tens of MiB per call (the GPU recipe in
``gpu_validation/README.md``): ``split`` writes ``DIR/<name>.part000``, ``.part001``, ... of at
most ``--chunk-mib`` MiB each and ``DIR/manifest.json`` with the whole file's size and SHA-256
and each chunk's size and SHA-256. ``join`` concatenates the chunks listed in the manifest into
``OUT`` while hashing; a missing or short chunk, or a wrong hash, is an error that names the
culprit, and nothing is left at ``OUT``.

    python -m gpu_validation.carry split model.gguf carry/ --chunk-mib 60
    python -m gpu_validation.carry join carry/ model.gguf

Exit status: 0 on success, 2 on a bad input or a failed check (``error: ...`` on stderr).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

MANIFEST = "manifest.json"
MIB = 1 << 20
BLOCK = 1 << 22


class CarryError(Exception):
    """A chunk is missing or corrupt, or the joined file's hash is wrong."""


def split(path, out_dir, chunk_mib: float = 60) -> dict:
    """Write the chunks of ``path`` and ``manifest.json`` into ``out_dir``; return the manifest."""
    path, out_dir = Path(path), Path(out_dir)
    if not path.is_file():
        raise CarryError(f"{path} is not a file")
    if not (isinstance(chunk_mib, (int, float)) and 0 < chunk_mib < float("inf")
            and int(chunk_mib * MIB) >= 1):
        raise CarryError(f"--chunk-mib must be a positive number, got {chunk_mib}")
    size = int(chunk_mib * MIB)
    out_dir.mkdir(parents=True, exist_ok=True)
    whole, chunks = hashlib.sha256(), []
    with open(path, "rb") as fh:
        while True:  # each chunk copied in blocks: memory stays flat whatever --chunk-mib is
            name = f"{path.name}.part{len(chunks):03d}"  # (a read of `size` bytes at once
            h, n = hashlib.sha256(), 0  # allocated them: --chunk-mib 1e5 was a MemoryError)
            with open(out_dir / name, "wb") as out:
                while n < size and (block := fh.read(min(BLOCK, size - n))):
                    out.write(block)
                    h.update(block)
                    whole.update(block)
                    n += len(block)
            if n == 0 and chunks:  # the file ended with the previous chunk
                (out_dir / name).unlink()
                break
            chunks.append({"file": name, "bytes": n, "sha256": h.hexdigest()})
            if n < size:
                break
    manifest = {"name": path.name, "bytes": sum(c["bytes"] for c in chunks),
                "sha256": whole.hexdigest(), "chunk_mib": chunk_mib, "chunks": chunks}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def join(chunk_dir, out_path, expected_sha256: str | None = None) -> Path:
    """Concatenate the chunks of ``chunk_dir``'s manifest into ``out_path``; check every hash.

    ``expected_sha256`` (optional: None for no pin) must also equal the manifest's whole-file
    hash, so a manifest carried together with the wrong chunks cannot vouch for them. It is read
    in any case, around white space; anything but 64 hexadecimal digits is an error, the empty
    string included (a failed ``--sha256 "$(...)"`` in a script, not a missing pin). The bytes go to
    ``out_path.partial`` first: on any error that file is removed and ``out_path`` is left as
    it was (absent, or a file that was already there).
    """
    chunk_dir, out_path = Path(chunk_dir), Path(out_path)
    if expected_sha256 is not None:  # '' skipped the check, an uppercase hash failed it
        pin = expected_sha256.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", pin):
            raise CarryError(f"--sha256 must be 64 hexadecimal digits, got {expected_sha256!r}")
        expected_sha256 = pin
    try:
        manifest = json.loads((chunk_dir / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise CarryError(f"cannot read {chunk_dir / MANIFEST}: {exc}") from None
    _check_manifest(manifest, chunk_dir / MANIFEST)
    if expected_sha256 is not None and expected_sha256 != manifest["sha256"]:
        raise CarryError(f"the manifest's SHA-256 {manifest['sha256']} is not the expected "
                         f"{expected_sha256}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".partial")
    whole = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for c in manifest["chunks"]:
                part = chunk_dir / c["file"]
                if not part.is_file():
                    raise CarryError(f"chunk {c['file']} is missing from {chunk_dir}")
                data = part.read_bytes()
                if len(data) != c["bytes"] or hashlib.sha256(data).hexdigest() != c["sha256"]:
                    raise CarryError(f"chunk {c['file']} is corrupt ({len(data)} bytes, "
                                     f"expected {c['bytes']} with the manifest's SHA-256)")
                whole.update(data)
                out.write(data)
        got = whole.hexdigest()
        if got != manifest["sha256"]:
            raise CarryError(f"SHA-256 of the joined file is {got}, expected "
                             f"{manifest['sha256']}: output removed")
        os.replace(tmp, out_path)
    except BaseException:
        if tmp.exists():  # only our own partial output: a file already at out_path stays
            tmp.unlink()
        raise
    return out_path


def _check_manifest(manifest, where: Path) -> None:
    """CarryError unless ``manifest`` has the shape :func:`split` writes."""
    def chunk_ok(c):
        return (isinstance(c, dict) and isinstance(c.get("file"), str)
                and Path(c["file"]).name == c["file"]  # a name inside the folder, no path
                and type(c.get("bytes")) is int and isinstance(c.get("sha256"), str))
    ok = (isinstance(manifest, dict) and isinstance(manifest.get("sha256"), str)
          and isinstance(manifest.get("chunks"), list) and manifest["chunks"]
          and all(chunk_ok(c) for c in manifest["chunks"]))
    if not ok:
        raise CarryError(f"{where} is not a chunk manifest (a 'sha256' and a non-empty list of "
                         "'chunks', each with 'file', 'bytes' and 'sha256')")


def main(argv=None) -> int:
    # rdk-theory's parser: a usage error is one line 'error: ...', exit 2 (argparse's own
    # printed the usage too)
    from rdk_theory.cli import _Parser

    parser = _Parser(prog="python -m gpu_validation.carry",
                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("split", help="FILE -> DIR/FILE.partNNN + DIR/manifest.json")
    s.add_argument("file", help="the file to cut into chunks")
    s.add_argument("dir", help="folder for the chunks and manifest.json (made if missing)")
    s.add_argument("--chunk-mib", type=float, default=60.0, help="default %(default)s")
    j = sub.add_parser("join", help="DIR (chunks + manifest) -> OUT, hash-checked")
    j.add_argument("dir", help="a folder written by split")
    j.add_argument("out", help="the file to write (via OUT.partial, renamed once hash-checked)")
    j.add_argument("--sha256", help="the hash the whole file must have, 64 hexadecimal digits "
                                    "(e.g. a registry pin); an empty one is an error")
    args = parser.parse_args(argv)
    try:
        if args.command == "split":
            m = split(args.file, args.dir, args.chunk_mib)
            print(f"{m['name']}: {m['bytes']} bytes in {len(m['chunks'])} chunk(s) of at most "
                  f"{args.chunk_mib:g} MiB in {args.dir}; SHA-256 {m['sha256']}")
        else:
            out = join(args.dir, args.out, args.sha256)
            print(f"joined {out} ({out.stat().st_size} bytes), SHA-256 OK")
    except CarryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that cannot be written, a disk that is full
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
