"""Fixtures for the reference broker's conformance tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from chaos.broker import Broker


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    """A running broker with default settings on a free loopback port."""
    async with Broker() as running:
        yield running
