"""Fuzzing the JMS selector parser: any text compiles or raises
``InvalidSelectorError``; a compiled selector evaluates any message without raising."""

from __future__ import annotations

from fuzzkit import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from haclient.errors import InvalidSelectorError
from haclient.selector import Selector, compile_selector

TOKENS = st.sampled_from(
    [
        "a", "b", "JMSType", "JMSPriority", "JMSXDeliveryCount", "=", "<>", "<", ">=", "+", "-",
        "*", "/", "(", ")", "AND", "OR", "NOT", "LIKE", "ESCAPE", "IN", "BETWEEN", "IS", "NULL",
        "TRUE", "FALSE", "'x'", "'%_'", "''''", "1", "2.5", "1e308", "1e999", "0x1F", "07", "-9",
        "9223372036854775808", ",", "'", "\\", "\x00", "é",
    ]
)  # fmt: skip
PROPERTIES = st.dictionaries(
    st.sampled_from(["a", "b", "JMSType"]),
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    max_size=3,
)


def _check(text: str, properties: dict[str, object]) -> None:
    try:
        selector = compile_selector(text)
    except InvalidSelectorError as exc:
        assert str(exc)
        return
    _evaluate(selector, properties)


def _evaluate(selector: Selector, properties: dict[str, object]) -> None:
    assert selector.matches(properties.get) in (True, False)
    assert selector.evaluate(properties.get) in (True, False, None)


@FUZZ
@given(st.text(max_size=60), PROPERTIES)
def test_any_text_compiles_or_raises_invalid_selector_error(
    text: str, properties: dict[str, object]
) -> None:
    _check(text, properties)


@FUZZ
@given(st.lists(TOKENS, max_size=12).map(" ".join), PROPERTIES)
def test_any_token_soup_compiles_or_raises_invalid_selector_error(
    text: str, properties: dict[str, object]
) -> None:
    _check(text, properties)
