"""Suite-wide test configuration: Hypothesis profiles and the Monte Carlo false-alarm budget.

Hypothesis profiles (select with the environment variable ``HYPOTHESIS_PROFILE``; default ``dev``):

* ``dev``: few random examples, for quick local runs;
* ``ci``: derandomised (the same examples on every run), used by the README test command;
* ``thorough``: many examples, run by hand:
  ``HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest tests/test_prop_*.py``.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# No test may reach a model hub: a refusal that should come before any model loads, once
# broken, then fails fast (an offline lookup error) instead of hanging on a download. The real
# models come from the local cache (fetched from PyPI wheels, not from a hub).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=30, **_COMMON)
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config):
    config.addinivalue_line("markers", "mc: a Monte Carlo test (counted against tests.stats budget)")


def pytest_collection_modifyitems(config, items):
    """A test marked ``gpu`` is skipped, with the reason, where torch sees no CUDA device."""
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    reason = "needs a CUDA device"
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda, reason = False, "needs a CUDA device and torch, which is not installed"
    if not has_cuda:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if the Monte Carlo assertions exceed the budget stated in tests/stats.py."""
    try:
        from tests import stats
    except ImportError:  # pragma: no cover
        return
    made = stats.assertions_made()
    if made > stats.MAX_MC_ASSERTIONS:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"ERROR: {made} Monte Carlo assertions exceed the budget MAX_MC_ASSERTIONS = "
            f"{stats.MAX_MC_ASSERTIONS} (tests/stats.py)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Tiny random Llama models (``tests/tiny_models.py``: ``narrow``, ``wide``, ``n_tokens``),
    built once per run and only read by the tests that take them."""
    for module in ("torch", "tokenizers", "transformers"):
        pytest.importorskip(module)
    from tests.tiny_models import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def stub_backends(monkeypatch):
    """For tests whose model loaders are stubs: gpu_validation's up-front check for torch,
    transformers and gguf (``models.backend_failure``) finds nothing missing, as where those
    extras are installed, so that the stubs are reached without them too."""
    from gpu_validation import models

    monkeypatch.setattr(models, "backend_failure", lambda *specs, **kwargs: None)
