"""Shared pytest setup: Hypothesis profiles (CI runs the "ci" profile)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="tests/ops/test_fuzz.py: every strided-view kind and batches 1, 5, 33 (default: the fast mode)",
    )
