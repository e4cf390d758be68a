"""Fuzzing failover URLs: any text parses or raises ``ConfigurationError``, and what
parses prints back to text that parses to the same value."""

from __future__ import annotations

from fuzzkit import FUZZ
from hypothesis import example, given
from hypothesis import strategies as st

from failover.url import FailoverURL, parse_url
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS

SEEDS = [
    "amqp://localhost",
    "amqps://user:p%40ss@[::1]:5671?amqp.idleTimeout=1000",
    "failover:(amqp://a:5672,amqp://b)?failover.method=roundrobin&failover.retries=3",
    "failover:(amqp://a,amqps://b?amqp.maxFrameSize=4096)?jms.clientID=x&jms.prefetch=5",
    "failover:(amqp://h)?failover.nested.amqp.idleTimeout=0&failover.timeout=1500",
]
# The characters URLs are made of, so that mutations stay close to the grammar.
ALPHABET = st.sampled_from([*"amqps:/()[],?&=%@.-_~+ 0123456789fFabcxyz", "\x00", "é"])


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A seed URL with a few characters inserted, deleted or replaced."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(st.text(ALPHABET, max_size=3)) + text[at + cut :]
    return text


def _check(text: str) -> None:
    try:
        url = parse_url(text, options=CLIENT_OPTIONS)
    except ConfigurationError as exc:
        assert str(exc)
        return
    assert isinstance(url, FailoverURL)
    printed = url.to_string(include_secrets=True)
    assert parse_url(printed, options=CLIENT_OPTIONS) == url, printed
    assert parse_url(printed, options=CLIENT_OPTIONS).to_string(include_secrets=True) == printed


@FUZZ
@given(st.text(max_size=80))
@example("failover:()")
@example("amqp://[")
@example("amqp://h:99999")
@example("amqps://user:p%F40ss@host")
def test_any_text_parses_or_raises_configuration_error(text: str) -> None:
    _check(text)


@FUZZ
@given(mutated())
def test_a_mutated_url_parses_or_raises_configuration_error(text: str) -> None:
    _check(text)
