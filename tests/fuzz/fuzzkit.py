"""The fuzz tests' settings: modest by default (each test a few seconds, run in CI with the
rest); ``HACLIENT_FUZZ_EXAMPLES=20000`` runs a deeper search by hand."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["FUZZ"]

FUZZ = settings(
    max_examples=int(os.environ.get("HACLIENT_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
