"""The suite's own layout: what lets every tier be collected in one run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    """The tiers are folders without ``__init__.py``, so pytest imports each test module by its
    file name: a second module of one name (``tests/unit/x.py``, ``tests/rules/x.py``) stops
    the run at collection ("import file mismatch")."""
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert {name for name, count in names.items() if count > 1} == set()
