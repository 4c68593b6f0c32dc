"""One validation run: load the pair, collect, study, generate, time; one JSON report + figures.

Stages (each recorded in the report with its duration):

1. load the target and drafter (built-in names, hub ids or local paths; see :mod:`.models`);
2. teacher-force both on the evaluation texts and the calibration texts (:mod:`.collect`);
3. acceptance study: predicted vs measured per sampler and kept size (:mod:`.study`);
4. end-to-end speculative generation at temperature 1 (:mod:`.speculative`);
5. O(N) timing sweep on synthetic laws (:mod:`.timing`).

The run passes when every agreement check passes (run-wide false-alarm rate
:data:`.agreement.FALSE_ALARM`, Bonferroni-split across all statistical checks of the run) and
every deterministic check holds: per kept size, vanilla's alpha equals TLI's and TLI's alpha is
at most the OOV cap ``p(I)`` at every position, to :data:`.study.EXACT_ROUNDOFF`
(:func:`.study.deterministic_checks`), and with ``--topk`` the compression bound. Deterministic
checks spend none of the false-alarm rate (they are not in its split).

Before its first file, a run removes from ``--out`` every file of :data:`OUTPUT_FILES` that an
earlier run left there (those names only), so the folder never holds files of two runs.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from rdk_theory._optional import import_failure
from rdk_theory._outdir import check_targets, out_folder, write_replacing
from rdk_theory._progress import wanted
from rdk_theory.validation import InputError, as_count

from . import agreement, collect, figures, models, pruning, speculative, study, timing
from .registry import DEFAULT_DRAFTER, DEFAULT_TARGET

FULL_KEPT = (65536, 32768, 16384, 8192, 4096)
QUICK_KEPT = (16384, 4096)
TOPK_ROUNDOFF = 1e-9  # float64 round-off allowed in the top-k bound check (sums over N terms)
#: The files a run writes in ``--out`` (laws*.npz with ``--topk`` only).
OUTPUT_FILES = ("report.json", "per_position.npz", "acceptance_vs_kept.png",
                "predicted_vs_measured.png", "time_vs_n.png", "laws.npz", "laws_calib.npz")
PROMPTS = (
    'def merge_sorted(a, b):\n    """Merge two sorted lists into one sorted list."""\n',
    "The old lighthouse keeper climbed the stairs every evening, and",
)


@dataclass
class RunConfig:
    target: str = DEFAULT_TARGET
    drafter: str = DEFAULT_DRAFTER
    device: str = "cpu"
    dtype: str = "auto"  # models.resolve_dtype: bf16 on Ampere+ CUDA, else float32
    kept: tuple = FULL_KEPT
    max_positions: int | None = None  # per run, evenly subsampled from the eval positions
    n_steps: int = 2000
    calib_rank: int = 64
    sparse_k: int = 16
    exact_max_kept: int | None = None
    e2e_kept: tuple = (65536, 4096)
    e2e_samplers: tuple = ("tli", "marginal")
    e2e_tokens: int = 96
    gamma: int = 4
    timing: bool = True
    timing_sizes: tuple | None = None
    topk: int | None = None  # save laws.npz top-k compressed (with the exact tail mass)
    seed: int = 0
    fetch_missing: bool = False
    out: str = "outputs/validation"
    progress: bool | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def quick(cls, **kw):
        base = dict(kept=QUICK_KEPT, max_positions=256, n_steps=1000, e2e_kept=(4096,),
                    e2e_samplers=("tli",), e2e_tokens=48, timing_sizes=(4096, 16384, 65536))
        base.update(kw)
        return cls(**base)


def environment() -> dict:
    import torch

    env = {"python": sys.version.split()[0], "platform": platform.platform(),
           "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
           "numpy": np.__version__, "torch": torch.__version__}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        env["cuda_device"] = torch.cuda.get_device_name(0)
    try:
        env["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return env


@contextmanager
def _bar(total, desc, enabled):
    """``with _bar(...) as bar``: a tqdm bar on stderr, closed on leaving, or None. ``enabled``
    None draws it when stderr is a terminal (or RDK_THEORY_PROGRESS=1), as every bar of
    rdk-theory; a pipe or a log file gets none."""
    bar = None
    if wanted(enabled):
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


def _collect_with_bar(tgt, drf, texts, desc, cfg):
    """:func:`.collect.collect` on ``texts`` with a bar of one step per text (minutes on CPU)."""
    with _bar(len(texts), desc, cfg.progress) as bar:
        return collect.collect(tgt, drf, texts, device=cfg.device, progress=bar)


def _refuse_big_kept(cfg: RunConfig, n: int) -> None:
    """InputError when a kept size of ``cfg`` (study or end-to-end) exceeds the ``n`` ids the
    two models share (a hub or local drafter's size is known only once loaded)."""
    big = [k for k in (*cfg.kept, *cfg.e2e_kept) if k > n]
    if big:
        raise InputError(f"kept size {big[0]} exceeds the drafter's vocabulary ({n:,} "
                         "ids shared with the target)")


def collect_pair(cfg: RunConfig, log=print):
    """Load both models (the drafter first) and teacher-force them; returns (target, drafter,
    eval, calib, counts).

    A kept size of ``cfg`` (``kept``, ``e2e_kept``) beyond the ids the two models share is
    refused once they are loaded, before teacher forcing (minutes on the CPU)."""
    # the drafter first: the smaller model, so a drafter that cannot load (a hub id that does
    # not exist, a truncation beyond a hub model's layers) fails before the target's minutes
    drf = models.load(cfg.drafter, device=cfg.device, dtype=cfg.dtype,
                      fetch_missing=cfg.fetch_missing, log=log)
    tgt = models.load(cfg.target, device=cfg.device, dtype=cfg.dtype,
                      fetch_missing=cfg.fetch_missing, log=log)
    if tgt.tokenizer.get_vocab() != drf.tokenizer.get_vocab():
        raise models.ModelError("the pruned-drafter study needs target and drafter with the same "
                                "tokenizer; these two differ (see --hetero for that case)")
    width = models.share_output_width(tgt, drf)  # LM heads padded to different widths
    if width is not None:
        log(f"LM heads of {tgt.output_width:,} and {drf.output_width:,} rows: both read over "
            f"their first {width:,} ids (past the tokenizer's {len(tgt.tokenizer):,})")
    n = width if width is not None else tgt.output_width  # the laws' width
    if cfg.kept or cfg.e2e_kept:
        _refuse_big_kept(cfg, n)
    study.check_sparse_k(cfg.sparse_k, n)  # before an earlier run's files go
    ev = _collect_with_bar(tgt, drf, collect.EVAL_TEXTS, "teacher-forcing evaluation texts", cfg)
    ca = _collect_with_bar(tgt, drf, collect.CALIB_TEXTS, "teacher-forcing calibration texts", cfg)
    cal_ids = [collect.tokenize(tgt.tokenizer, collect.read_text(n)) for n in collect.CALIB_TEXTS]
    counts = pruning.token_counts(cal_ids, ev.p.shape[1])
    return tgt, drf, ev, ca, counts


#: The samplers end-to-end generation can run: TLI and the kernels built without the study's
#: sparse exact rows (:func:`.samplers.build_kernels` with ``topk_rows=None``).
E2E_SAMPLERS = ("tli", "marginal", "rdk_first_order")


def run(cfg: RunConfig, log=print) -> dict:
    """Run every stage; write ``report.json``, ``per_position.npz`` and figures to ``cfg.out``.

    The settings, the model specs (:func:`.models.check_spec`) and ``cfg.out`` are checked
    before any model is loaded; a run that fails removes the folders it made for ``cfg.out``
    while they are empty (never one that existed before, nor the files already written)."""
    # gamma 0 or e2e_tokens 0 made every end-to-end check pass on 0 positions (plain target
    # sampling); calib_rank -1 kept S - 1 directions through a slice, 0 failed after the study
    cfg = replace(cfg, gamma=as_count(cfg.gamma, "gamma", 1),  # 4.0 passed, then failed late
                  e2e_tokens=as_count(cfg.e2e_tokens, "e2e_tokens", 1),
                  calib_rank=None if cfg.calib_rank is None else  # None: the full factor
                  as_count(cfg.calib_rank, "calib_rank", 1))
    unknown = [s for s in cfg.e2e_samplers if s not in E2E_SAMPLERS]
    if unknown:  # it would have generated with TLI under the other name
        raise InputError(f"end-to-end sampler {unknown[0]!r} is not available: choose from "
                         f"{', '.join(E2E_SAMPLERS)}")
    untuned = [k for k in cfg.e2e_kept if k not in cfg.kept]
    if "rdk_first_order" in cfg.e2e_samplers and untuned:  # it ran at an absolute tau of 1e-4
        raise InputError(f"end-to-end first-order RDK takes its tau from the study's calibration "
                         f"pick at the same kept size: end-to-end size {untuned[0]} must be "
                         "among the study's kept sizes")
    big = [n for n in (cfg.timing_sizes or ()) if n > timing.MAX_SIZE] if cfg.timing else []
    if big:  # refused before the models load, not out of memory at the end
        raise InputError(f"timing size {big[0]:,} exceeds {timing.MAX_SIZE:,} (4x the largest "
                         "built-in vocabulary, Gemma 3's 262,144)")
    models.check_specs(cfg.target, cfg.drafter, fetch_missing=cfg.fetch_missing)
    tgt_b, drf_b = models.builtin_base(cfg.target), models.builtin_base(cfg.drafter)
    if tgt_b and drf_b and tgt_b.vocab_size != drf_b.vocab_size:  # known without loading them
        raise InputError(f"the pruned-drafter study needs target and drafter with the same "
                         f"tokenizer; {tgt_b.name} ({tgt_b.vocab_size:,} ids) and {drf_b.name} "
                         f"({drf_b.vocab_size:,}) differ (see --hetero for that case)")
    with out_folder(cfg.out):
        check_targets(cfg.out, OUTPUT_FILES)  # a folder there would fail only at the end
        return _run_stages(cfg, Path(cfg.out), log)


def _run_stages(cfg: RunConfig, out: Path, log) -> dict:
    rng = np.random.default_rng(cfg.seed)
    t0 = time.perf_counter()
    dur = {}
    tgt, drf, ev, ca, counts = collect_pair(cfg, log)
    _refuse_big_kept(cfg, len(counts))  # collect_pair refused these on the heads' width
    dur["load_and_collect_s"] = time.perf_counter() - t0
    sel = np.arange(ev.p.shape[0])
    if cfg.max_positions and cfg.max_positions < sel.size:
        sel = np.linspace(0, sel.size - 1, cfg.max_positions).round().astype(int)
    mu, factor = collect.calibration_stats(ca.p, rank=cfg.calib_rank)
    t1 = time.perf_counter()
    with _bar(sel.size * len(cfg.kept), "acceptance study", cfg.progress) as bar:
        st = study.acceptance_study(ev.p[sel], ev.q[sel], counts, cfg.kept, mu=mu,
                                    factor=factor, p_cal=ca.p, q_cal=ca.q, n_steps=cfg.n_steps,
                                    rng=rng, sparse_k=cfg.sparse_k,
                                    exact_max_kept=cfg.exact_max_kept, progress=bar,
                                    other_tests=_e2e_tests(cfg))
    dur["study_s"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    e2e = end_to_end(cfg, tgt, drf, counts, mu, factor, st["taus"], rng, log, st["n_tests"])
    dur["speculative_s"] = time.perf_counter() - t2
    # this run's first file is next: an earlier run's files go first, all of them (a figure
    # this run skips or is interrupted drawing, a report beside this run's laws.npz), and not
    # sooner (a study or generation that fails, or is interrupted, leaves them in place)
    _remove_previous(out)
    laws = save_laws(out / "laws.npz", ev, ca, cfg.topk) if cfg.topk else None
    dur["total_s"] = time.perf_counter() - t0
    checks = [c["pass"] for r in st["rows"] for c in r["checks"].values()]
    checks += [e["check"]["pass"] for e in e2e]
    # deterministic (no false-alarm rate spent): vanilla == TLI, TLI <= p(I), per position
    checks += [c["pass"] for r in st["rows"] for c in r["deterministic_checks"].values()]
    if laws is not None:
        checks.append(laws["bound_holds"])
    report = {
        "kind": "rdk-theory gpu_validation run",
        "command": command_line(),
        "environment": environment(), "device": cfg.device,
        # the dtype the models computed in (settings.dtype is what was asked: maybe "auto")
        "dtype": tgt.info["dtype"],
        "models": {"target": tgt.info, "drafter": drf.info},
        "settings": {k: v for k, v in asdict(cfg).items() if k not in ("progress",)},
        "data": {"eval_texts": list(collect.EVAL_TEXTS), "calib_texts": list(collect.CALIB_TEXTS),
                 "eval_positions": int(ev.p.shape[0]), "positions_used": int(sel.size),
                 "calibration_positions": int(ca.p.shape[0]),
                 "teacher_forced_alpha_full_vocab": {
                     name: float(np.minimum(ev.p[ev.source == i], ev.q[ev.source == i])
                                 .astype(np.float64).sum(1).mean())
                     for i, name in enumerate(ev.texts)}},
        "study": {k: v for k, v in st.items() if k != "per_position"},
        "speculative": e2e, "timing": None, "laws_file": laws, "durations_s": dur,
        "false_alarm": agreement.FALSE_ALARM,
        "all_checks_pass": bool(all(checks)), "n_checks": len(checks),
    }
    per_position = {f"{k}:{w}": np.asarray(v[w], dtype=np.float32)
                    for k, v in st["per_position"].items() for w in ("predicted", "measured")}
    from .topk import write_npz

    write_npz(out / "per_position.npz", per_position)
    # written before the timing sweep, and again after it: a sweep that fails (out of memory
    # at a large --timing-sizes, say) no longer takes the study and generation with it
    _write_report(out, report)
    title = f"{tgt.spec} target, {drf.spec} drafter ({sel.size} positions, {cfg.device})"
    try:
        _write(out, "acceptance_vs_kept.png", lambda tmp: figures.acceptance_vs_kept(st, tmp, title))
        _write(out, "predicted_vs_measured.png", lambda tmp: figures.predicted_vs_measured(st, tmp))
    except ImportError as exc:  # a GPU image without matplotlib: the JSON has every number
        log(f"figures skipped: {import_failure(exc)}")
    if cfg.timing:
        t3 = time.perf_counter()
        report["timing"] = tim = timing.sweep(device=cfg.device, sizes=cfg.timing_sizes,
                                              seed=cfg.seed)
        dur["timing_s"] = time.perf_counter() - t3
        dur["total_s"] = time.perf_counter() - t0
        _write_report(out, report)
        try:
            _write(out, "time_vs_n.png", lambda tmp: figures.time_vs_n(tim, tmp))
        except ImportError:  # said above
            pass
    return report


def _write(out: Path, name: str, write) -> None:
    """``write(tmp)`` then a rename onto ``out / name``: never through a symbolic link there,
    never a half-written file (:func:`rdk_theory._outdir.write_replacing`)."""
    write_replacing(str(out / name), lambda tmp: write(Path(tmp)))


def _write_report(out: Path, report: dict) -> None:
    text = json.dumps(report, indent=1, default=_json_default)
    _write(out, "report.json", lambda tmp: tmp.write_text(text))


def _remove_previous(out: Path) -> None:
    """Remove the files of :data:`OUTPUT_FILES` in ``out`` (an earlier run's: this one has
    written none yet), a symbolic link at such a name as a link (never its target); any other
    file in ``out`` is left alone."""
    for name in OUTPUT_FILES:
        path = out / name
        if path.is_symlink() or path.is_file():
            path.unlink()


def command_line(argv=None) -> str:
    """The command of this process as one can paste it: ``sys.argv`` quoted for a POSIX
    shell, ``python -m PACKAGE`` where Python ran a package's ``__main__.py`` (``python -m
    gpu_validation run ...`` recorded ``__main__.py run ...``)."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    head = Path(argv[0])
    if head.name == "__main__.py" and head.parent.name:
        prog = ["python", "-m", head.parent.name]
    else:
        prog = [head.name or argv[0]]
    return shlex.join(prog + argv[1:])


def save_laws(path: Path, ev, ca, k: int) -> dict:
    """Write the eval and calibration laws to ``path`` top-``k`` compressed; check the bound.

    The check: per eval position, ``|alpha(p, q) - alpha(p~, q~)| <= tail_p + tail_q``
    (:func:`.topk.alpha_error_bound`) with ``p~, q~`` read back from the file.
    """
    from rdk_theory.acceptance import acceptance_rate

    from . import topk

    topk.save(path, {"p": ev.p, "q": ev.q, "next_ids": ev.next_ids, "source": ev.source},
              topk=k)
    cal_path = path.with_name(path.stem + "_calib.npz")
    topk.save(cal_path, {"p": ca.p, "q": ca.q, "next_ids": ca.next_ids, "source": ca.source},
              topk=k)
    with np.load(path) as z:
        stored = {key: z[key] for key in z.files}
    n_p, n_q = int(stored["p_n"]), int(stored["q_n"])
    k_stored = int(stored["p_ids"].shape[1])  # a k above the vocabulary stores every id
    err, bound = [], []
    for s in range(0, ev.p.shape[0], 256):  # chunks: a dense float64 copy of all rows is GBs
        sl = slice(s, s + 256)
        pt, qt = stored["p_tail"][sl], stored["q_tail"][sl]
        p_c = topk.decompress(stored["p_ids"][sl], stored["p_values"][sl], pt, n_p)
        q_c = topk.decompress(stored["q_ids"][sl], stored["q_values"][sl], qt, n_q)
        comp = acceptance_rate(p_c, q_c, check=False)
        full = acceptance_rate(ev.p[sl].astype(np.float64), ev.q[sl].astype(np.float64),
                               check=False)
        err.append(np.abs(full - comp))
        bound.append(topk.alpha_error_bound(pt, qt))
    err, bound = np.concatenate(err), np.concatenate(bound)
    tp, tq = stored["p_tail"], stored["q_tail"]
    return {"path": path.name, "calibration_path": cal_path.name, "k": k_stored,
            "k_requested": int(k),
            "bytes": path.stat().st_size + cal_path.stat().st_size,
            "tail_p_mean": float(tp.mean()), "tail_p_max": float(tp.max()),
            "tail_q_mean": float(tq.mean()), "tail_q_max": float(tq.max()),
            "alpha_abs_error_max": float(err.max()), "bound_max": float(bound.max()),
            "bound_holds": bool(np.all(err <= bound + TOPK_ROUNDOFF))}


def _e2e_tests(cfg) -> int:
    """How many end-to-end checks the run makes (one per kept size and sampler)."""
    return len(cfg.e2e_kept) * len(cfg.e2e_samplers)


def end_to_end(cfg, tgt, drf, counts, mu, factor, taus, rng, log, n_tests=None) -> list[dict]:
    """Speculative generation for each (kept size, sampler) of the config; ``n_tests``: the
    number of checks the run-wide false-alarm rate is split over (default: these alone)."""
    from rdk_theory.proposals import tli_proposal

    from .samplers import build_kernels

    results = []
    n_tests = max(1, n_tests or _e2e_tests(cfg))
    for K in cfg.e2e_kept:  # sizes checked against the vocabulary by run()
        vm = pruning.pruned_vocab_map(counts, K)
        tau_fo = (taus.get(K) or {}).get("rdk_first_order")  # picked by the study (run() checks)
        kernels = build_kernels(vm, mu, factor, tau_exact=None, tau_fo=tau_fo, topk_rows=None)
        for s in cfg.e2e_samplers:
            kern = kernels.get(s)

            def make(qk, kern=kern, vm=vm):
                r = tli_proposal(qk[None], vm, check=False)
                return (kern.transport(r) if kern is not None else r)[0]

            alphas, acc, hist, calls, new = [], [], np.zeros(cfg.gamma + 1, int), 0, 0
            for prompt in PROMPTS:
                ids = collect.tokenize(tgt.tokenizer, prompt)
                g = speculative.generate(tgt, drf, ids, vm, make, gamma=cfg.gamma,
                                         max_new_tokens=cfg.e2e_tokens, rng=rng,
                                         device=cfg.device)
                alphas += g["alphas"]
                acc += g["accepted"]
                hist += np.asarray(g["accept_length_histogram"])
                calls += g["target_calls"]
                new += g["new_tokens"]
            chk = agreement.martingale_agreement(alphas, acc, n_tests)
            results.append({
                "kept": int(K), "sampler": s, "gamma": cfg.gamma, "new_tokens": new,
                "target_calls": calls, "tokens_per_call": new / max(calls, 1),
                "iid_prediction_tokens_per_call": speculative.iid_tokens_per_call(
                    float(np.mean(alphas)) if alphas else 0.0, cfg.gamma),
                "accept_length_histogram": hist.tolist(), "check": chk})
            log(f"e2e K={K} {s}: {new / max(calls, 1):.2f} tokens/call, accepts "
                f"{chk['measured_accepts']} vs predicted {chk['predicted_accepts']:.1f}")
    return results


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))


#: How the summary names each deterministic check of :func:`.study.deterministic_checks`.
DETERMINISTIC_LABELS = {"vanilla_equals_tli": "vanilla == TLI",
                        "tli_within_oov_cap": "TLI <= OOV cap"}


def _deterministic_lines(rows) -> list[str]:
    """One line when every deterministic check holds, else one per kept size with a failure
    (each check 'ok' or 'FAIL' with its worst position's value). Rows of a report written
    before these checks existed have none: no line."""
    rows = [r for r in rows if r.get("deterministic_checks")]
    if not rows:
        return []
    tol = next(iter(rows[0]["deterministic_checks"].values()))["tolerance"]
    if all(c["pass"] for r in rows for c in r["deterministic_checks"].values()):
        return [f"deterministic checks per position (to {tol:g}): "
                + ", ".join(f"{DETERMINISTIC_LABELS.get(n, n)} ok"
                            for n in rows[0]["deterministic_checks"]) + " at every kept size"]
    lines = []
    for r in rows:
        checks = r["deterministic_checks"]
        if all(c["pass"] for c in checks.values()):
            continue
        cells = []
        for name, c in checks.items():
            worst = next(v for k, v in c.items() if k.startswith("max_"))
            cells.append(f"{DETERMINISTIC_LABELS.get(name, name)} "
                         + ("ok" if c["pass"] else f"FAIL (worst {worst:.3g}, "
                            f"{c['positions_failing']} positions)"))
        lines.append(f"K={r['kept']} deterministic checks per position (to {tol:g}): "
                     + ", ".join(cells))
    return lines


def summary_lines(report: dict) -> list[str]:
    """A readable table of the run for the terminal."""
    lines = [f"{'kept':>7} {'OOV cap':>8} " + " ".join(f"{s:>16}" for s in study.SAMPLERS)]
    for r in report["study"]["rows"]:
        cells = []
        for s in study.SAMPLERS:
            c = r["checks"].get(s)
            if c is None:
                cells.append(f"{'-':>16}")
            else:
                mark = "ok" if c["pass"] else "FAIL"
                cells.append(f"{c['predicted_mean']:.4f}/{c['measured_mean']:.4f} {mark:>2}"
                             .rjust(16))
        lines.append(f"{r['kept']:>7} {r['oov_cap']:>8.4f} " + " ".join(cells))
    for e in report["speculative"]:
        c = e["check"]
        lines.append(f"e2e K={e['kept']} {e['sampler']}: {e['tokens_per_call']:.2f} tokens/call, "
                     f"accepted {c['measured_accepts']} vs predicted {c['predicted_accepts']:.1f}"
                     f" (p={c['p_value']:.3f}) {'ok' if c['pass'] else 'FAIL'}")
    lines += _deterministic_lines(report["study"]["rows"])
    if report.get("timing"):
        fitted = [f"{k}={v:.2f}" for k, v in report["timing"]["slopes"].items() if v is not None]
        lines.append("slopes: " + (", ".join(fitted) if fitted else
                                   "none (a slope needs at least 2 timing sizes)"))
    lines.append("ALL CHECKS PASS" if report["all_checks_pass"] else "SOME CHECKS FAILED")
    return lines
