"""One table of ``failover.*`` options: ``failover.policy.FAILOVER_OPTIONS`` declares each
option once, and from it come ``FailoverPolicy.from_options``/``to_options``, the checks of the
policy's fields, did-you-mean and docs/api.md's failover options table.

``python tests/unit/test_options_table.py`` rewrites the docs' block.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover.errors import ConfigurationError
from failover.options import (
    Choice,
    Flag,
    Kind,
    Member,
    Milliseconds,
    MinusOneIsNone,
    Names,
    Number,
    Option,
    Text,
    WholeNumber,
)
from failover.policy import FAILOVER_OPTIONS, FailoverMethod, FailoverPolicy
from failover.url import parse_url
from haclient.options import CLIENT_OPTIONS, docs_with_failover_table, failover_markdown

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"

# ``accepted_options`` records the options accepted without effect: no option sets it.
_FIELDS = {
    f.name: f.default for f in dataclasses.fields(FailoverPolicy) if f.name != "accepted_options"
}
_SETTING_A_FIELD = [o for o in FAILOVER_OPTIONS if o.keyword is not None]


# --- The docs are the table -----------------------------------------------------------------


def test_api_md_failover_options_table_is_the_code_table() -> None:
    text = API_MD.read_text()
    assert docs_with_failover_table(text) == text, (
        "docs/api.md's failover options table differs from failover.policy.FAILOVER_OPTIONS: "
        "run `python tests/unit/test_options_table.py` to regenerate it"
    )
    assert failover_markdown() in text


def test_every_failover_option_and_qpid_name_has_a_row() -> None:
    table = failover_markdown()
    for option in FAILOVER_OPTIONS:
        assert option.doc and option.doc in table
        assert f"| `{option.name}` |" in table
        for alias in option.aliases:
            assert f"`{alias}`" in table


# --- The table and FailoverPolicy agree --------------------------------------------------------


def test_every_field_is_set_by_one_option_with_the_field_default() -> None:
    assert set(FAILOVER_OPTIONS.keywords) == set(_FIELDS)
    for option in _SETTING_A_FIELD:
        assert _FIELDS[str(option.keyword)] == option.default, option.label


def test_every_option_is_a_failover_option_unknown_to_the_client_table() -> None:
    """The failover table stays with the policy: the URL parser hands it ``failover.*``."""
    for name in FAILOVER_OPTIONS.url_names:
        assert name.startswith("failover.") and CLIENT_OPTIONS.named(name) is None


@pytest.mark.parametrize("option", _SETTING_A_FIELD, ids=lambda o: o.label)
def test_the_default_prints_and_reads_back(option: Option) -> None:
    field = str(option.keyword)
    default = option.default
    if default is not None:
        assert option.parse(option.kind.format(default)) == default
    text = option.kind.format(default) if default is not None else None
    if text is not None:
        assert getattr(FailoverPolicy.from_options({str(option.name): text}), field) == default


@pytest.mark.parametrize(
    "option", [o for o in FAILOVER_OPTIONS if o.aliases], ids=lambda o: o.label
)
def test_a_qpid_jms_name_sets_the_same_field(option: Option) -> None:
    (alias,) = option.aliases
    text = option.kind.format(_value_other_than_default(option))
    by_name = FailoverPolicy.from_options({str(option.name): text})
    assert FailoverPolicy.from_options({alias: text}) == by_name
    assert getattr(by_name, str(option.keyword)) != option.default
    with pytest.raises(ConfigurationError, match="different values") as info:
        FailoverPolicy.from_options({alias: text, str(option.name): option.kind.format(1)})
    assert info.value.option == option.name


def _value_other_than_default(option: Option) -> Any:
    kind = option.kind
    if isinstance(kind, MinusOneIsNone):
        return 7
    return 7 if isinstance(kind, WholeNumber) else 3.5


def test_the_fields_are_checked_by_the_kinds_of_the_table() -> None:
    with pytest.raises(ConfigurationError, match="retries must be a whole number") as info:
        FailoverPolicy(retries=0)
    assert info.value.option == "retries"
    with pytest.raises(ConfigurationError, match="method must be a FailoverMethod"):
        FailoverPolicy(method="roundrobin")  # type: ignore[arg-type]


# --- Did you mean: the one helper ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("misspelt", "meant"),
    [
        ("failover.maxReconectAttempts", "failover.maxReconnectAttempts"),
        ("failover.cyclecont", "failover.cyclecount"),
        ("failover.useReconnectBackof", "failover.useReconnectBackOff"),
        ("failvoer.retries", "failover.retries"),  # not a failover.* name: a connection one
    ],
)
def test_a_misspelt_failover_option_is_answered_with_the_nearest_name(
    misspelt: str, meant: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"did you mean {meant}\?") as info:
        parse_url(f"failover:(amqp://a)?{misspelt}=1", options=CLIENT_OPTIONS)
    assert info.value.option == misspelt


# --- The kinds keep their law: parse(format(v)) == v -------------------------------------------


def _values(kind: Kind) -> st.SearchStrategy[Any]:
    """Values a kind accepts."""
    if isinstance(kind, MinusOneIsNone):
        return st.none() | _values(kind.kind)
    if isinstance(kind, WholeNumber):
        return st.integers(-(10**6) if kind.minimum is None else kind.minimum, 10**6)
    if isinstance(kind, Member):
        return st.sampled_from(list(kind.members))
    if isinstance(kind, Choice):
        return st.sampled_from(kind.choices)
    if isinstance(kind, Number):
        return st.floats(kind.minimum, 1e6, allow_nan=False)
    if isinstance(kind, Milliseconds):
        seconds = st.floats(0.0, 1e6, allow_nan=False)
        return seconds.filter(lambda v: v > 0) if kind.positive else seconds
    if isinstance(kind, Text):
        return st.text(min_size=0 if kind.empty else 1, max_size=12)
    if isinstance(kind, Names):
        name = st.from_regex(r"[a-z][a-z0-9:/.]{0,11}", fullmatch=True)
        return st.lists(name, min_size=1, max_size=3, unique=True).map(tuple)
    assert isinstance(kind, Flag)
    return st.booleans()


@pytest.mark.parametrize("option", list(FAILOVER_OPTIONS), ids=lambda o: o.label)
def test_every_value_of_a_kind_prints_and_reads_back(option: Option) -> None:
    @given(_values(option.kind))
    def round_trip(value: Any) -> None:
        again = option.parse(option.kind.format(value))
        expected = pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
        assert again == expected
        assert option.check(value) == value

    round_trip()


def test_new_kinds_say_what_they_accept() -> None:
    with pytest.raises(ValueError, match="one of singlebroker, roundrobin"):
        Member(FailoverMethod).parse("failover_exchange")
    assert Member(FailoverMethod).parse("RoundRobin") is FailoverMethod.ROUNDROBIN
    with pytest.raises(ValueError, match="at least 1"):
        Number(1.0).parse("0.5")
    with pytest.raises(ValueError, match="non-negative number of milliseconds"):
        Milliseconds().parse("1e3")
    with pytest.raises(ValueError, match="positive"):
        Milliseconds(positive=True).parse("0")
    assert Milliseconds().parse("2.5") == 0.0025
    unlimited = MinusOneIsNone(WholeNumber(0), "unlimited")
    assert unlimited.parse("-1") is None and unlimited.format(None) == "-1"
    with pytest.raises(ValueError, match=r"\(or -1: unlimited\)"):
        unlimited.parse("-2")
    with pytest.raises(ValueError, match=r"\(or None: unlimited\)"):
        unlimited.check(-1)
