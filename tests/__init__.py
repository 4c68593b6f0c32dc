"""Test suite of rdk-theory. A package so that helpers import as ``tests.stats``, ``tests.tolerances``."""
