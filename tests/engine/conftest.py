"""Fixtures for the engine tests; the helpers live in ``enginekit``."""

from __future__ import annotations

import pytest
from enginekit import Pair, make_pair


@pytest.fixture
def pair() -> Pair:
    return make_pair()
