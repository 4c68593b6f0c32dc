"""Validation of the rdk_theory calculators on real language models (CPU or CUDA).

Modules: :mod:`.registry` (the built-in PyPI-shipped models), :mod:`.models` (fetch, verify,
cache, load), :mod:`.pruning`, :mod:`.collect` (teacher-forced laws, calibration statistics),
:mod:`.topk` (compression with exact tail mass), :mod:`.samplers`, :mod:`.agreement`,
:mod:`.study` (predicted vs measured acceptance), :mod:`.speculative` (end-to-end generation),
:mod:`.timing` (O(N) sweep), :mod:`.harness` (one run, one JSON report and figures),
:mod:`.hetero` (TLI maps between real tokenizers, the OOV cap), :mod:`.carry` (split/join
files with SHA-256 checks, for the GPU recipe).
Heavy dependencies (torch, transformers) are imported only where used.
"""
