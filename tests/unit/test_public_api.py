"""The names API.md promises are importable from the top-level package."""

from __future__ import annotations

import haclient


def test_api_md_names_are_exported() -> None:
    promised = {
        "Queue",
        "Topic",
        "TextMessage",
        "BytesMessage",
        "MapMessage",
        "StreamMessage",
        "Int",
        "Byte",
        "Short",
        "Long",
        "Float",
        "Double",
        "HAClientError",
        "ConfigurationError",
        "TransactionRolledBackError",
    }
    missing = {name for name in promised if not hasattr(haclient, name)}
    assert missing == set()
    assert set(haclient.__all__) >= promised
