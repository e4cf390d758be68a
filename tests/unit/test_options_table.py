"""One table of options: the docs, the keywords, the URL, did-you-mean, the masker and the
per-broker overrides all come from ``haclient.options.CLIENT_OPTIONS``.

Run as a script, this module rewrites the generated options tables of docs/api.md (the
keyword table and the failover options table, ``tests/unit/test_failover_options_table.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover.options import (
    MASK,
    Choice,
    Duration,
    Flag,
    MinusOneIsNone,
    Names,
    Option,
    OptionTable,
    Scope,
    Status,
    Text,
    WholeNumber,
    mask_option_values,
    masked,
    unknown_option_error,
)
from failover.url import BrokerURL, FailoverURL, mask_secrets, parse_url
from haclient.aio.options import ConnectionOptions
from haclient.amqp.config import sasl_names
from haclient.errors import ConfigurationError
from haclient.options import (
    CLIENT_OPTIONS,
    SASL_NAMES,
    docs_with_table,
    docs_with_tables,
    markdown,
)

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"


# --- The docs are the table -----------------------------------------------------------------


def test_api_md_options_table_is_the_code_table() -> None:
    text = API_MD.read_text()
    assert docs_with_table(text) == text, (
        "docs/api.md's options table differs from haclient.options.CLIENT_OPTIONS: run "
        "`python tests/unit/test_options_table.py` to regenerate it"
    )
    assert markdown() in text


def test_every_declared_option_has_a_row() -> None:
    table = markdown()
    for option in CLIENT_OPTIONS:
        assert option.doc and option.doc in table
        if option.name:
            assert f"`{option.name}`" in table
        if option.keyword:
            assert f"| `{option.keyword}` |" in table


# --- The table and ConnectionOptions agree ------------------------------------------------------


def test_every_keyword_is_a_connection_options_field_with_the_declared_default() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(ConnectionOptions)}
    assert set(fields) == set(CLIENT_OPTIONS.keywords)
    for option in CLIENT_OPTIONS:
        if option.keyword is None:  # only a Qpid JMS option accepted without effect has none
            assert option.status is Status.ACCEPTED, option.label
            continue
        assert fields[option.keyword] == option.default, option.keyword


def test_the_client_table_is_given_to_the_url_parser_and_kept() -> None:
    url = parse_url("amqp://h?jms.prefetch=5&jms.password=pw", options=CLIENT_OPTIONS)
    assert url.table is CLIENT_OPTIONS and url.brokers[0].table is CLIENT_OPTIONS
    assert "pw" not in str(url)
    with pytest.raises(ValueError, match="declared twice"):
        CLIENT_OPTIONS + OptionTable([Option("jms.prefetch", WholeNumber(0), 1, "a clash")])


@pytest.mark.parametrize("option", list(CLIENT_OPTIONS), ids=lambda o: o.label)
def test_url_text_and_keyword_values_round_trip(option: Option) -> None:
    """``parse(format(v)) == v`` for the default and the URL's value reads as the keyword's."""
    default = option.default
    if default is None or option.name is None or option.keyword is None:
        return
    assert option.parse(option.kind.format(default)) == default
    url = parse_url(f"amqp://h?{option.name}={option.kind.format(default)}", options=CLIENT_OPTIONS)
    assert getattr(ConnectionOptions.build(url, {}), str(option.keyword)) == default


def test_connection_options_print_back_as_url_options() -> None:
    options = ConnectionOptions(
        client_id="app",
        password="hunter2",
        prefetch=5,
        idle_timeout=None,
        max_frame_size=1024,
        selectors="client",
        dedup_age=1.5,
    )
    text = options.url_options(include_secrets=True)
    assert text["amqp.idleTimeout"] == "0" and "attach_timeout" not in str(text)
    query = "&".join(f"{k}={v}" for k, v in text.items())
    assert (
        ConnectionOptions.build(parse_url(f"amqp://h?{query}", options=CLIENT_OPTIONS), {})
        == options
    )
    assert options.url_options()["jms.password"] == MASK


def _values(option: Option) -> st.SearchStrategy[Any]:
    """Values the option accepts, drawn by its kind."""
    kind = option.kind
    if isinstance(kind, MinusOneIsNone):
        return st.none() | _values(dataclasses.replace(option, kind=kind.kind))
    if isinstance(kind, WholeNumber):
        return st.integers(kind.minimum or 0, 10**6)
    if isinstance(kind, Choice):
        return st.sampled_from(kind.choices)
    if isinstance(kind, Text):
        text = st.text(min_size=0 if kind.empty else 1, max_size=12)
        pattern = kind.pattern
        return text.filter(lambda t: re.fullmatch(pattern, t) is not None) if pattern else text
    if isinstance(kind, Flag):
        return st.booleans()
    if isinstance(kind, Names):
        name = (
            st.sampled_from(kind.known)
            if kind.known
            else st.from_regex(r"[A-Z0-9-]{1,10}", fullmatch=True)
        )
        return st.lists(name, min_size=1, max_size=3, unique=True).map(tuple)
    assert isinstance(kind, Duration)
    whole_ms = st.integers(1, 10**6).map(lambda ms: ms / 1000)
    return st.none() | whole_ms if kind.zero_is_none else whole_ms


_WITH_URL_NAMES = [o for o in CLIENT_OPTIONS if o.name is not None and o.keyword is not None]


@given(st.fixed_dictionaries({}, optional={str(o.keyword): _values(o) for o in _WITH_URL_NAMES}))
def test_every_url_option_round_trips_through_the_url(keywords: dict[str, Any]) -> None:
    options = ConnectionOptions(**keywords)
    url = FailoverURL(
        (BrokerURL("amqp", "h"),),
        connection_options=options.url_options(include_secrets=True),
        table=CLIENT_OPTIONS,
    )
    again = parse_url(url.to_string(include_secrets=True), options=CLIENT_OPTIONS)
    assert again == url
    assert ConnectionOptions.build(again, {}) == options


# --- Per-broker overrides ----------------------------------------------------------------------


def test_per_broker_override_round_trip() -> None:
    url = parse_url(
        "failover:(amqp://a?amqp.idleTimeout=5000&amqp.maxFrameSize=1024,amqp://b)"
        "?amqp.idleTimeout=20000&jms.prefetch=7",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    a, b = (options.for_broker(broker) for broker in url.brokers)
    assert (a.idle_timeout, a.max_frame_size, a.prefetch) == (5.0, 1024, 7)
    assert (b.idle_timeout, b.max_frame_size, b.prefetch) == (20.0, None, 7)
    again = parse_url(url.to_string(include_secrets=True), options=CLIENT_OPTIONS)
    assert again == url
    assert [options.for_broker(x) for x in again.brokers] == [a, b]


def test_engine_config_takes_the_broker_override() -> None:
    from haclient.aio.physical import engine_config

    broker = BrokerURL("amqp", "a", options={"amqp.idleTimeout": "0"}, table=CLIENT_OPTIONS)
    options = ConnectionOptions(idle_timeout=30.0, max_frame_size=4096)
    config = engine_config(broker, options, "c")
    assert (config.idle_timeout, config.max_frame_size) == (None, 4096)


def test_sasl_mechanisms_reach_the_engine_and_may_differ_per_broker() -> None:
    from haclient.aio.physical import engine_config

    url = parse_url(
        "failover:(amqp://a?amqp.saslMechanisms=PLAIN,amqp://b)?amqp.saslMechanisms=scram-sha-256",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {"username": "u", "password": "p"})
    assert options.sasl_mechanisms == ("SCRAM-SHA-256",)
    a, b = (engine_config(broker, options, "c").auth for broker in url.brokers)
    assert a is not None and a.mechanisms == ("PLAIN",)
    assert b is not None and b.mechanisms == ("SCRAM-SHA-256",)
    with pytest.raises(ConfigurationError, match=r"'CRAM-MD5'.*supported: EXTERNAL, SCRAM-SHA-512"):
        parse_url("amqp://a?amqp.saslMechanisms=PLAIN,CRAM-MD5", options=CLIENT_OPTIONS)
    with pytest.raises(ConfigurationError, match=r"sasl_mechanisms .*'NOPE'"):
        ConnectionOptions(sasl_mechanisms=["NOPE"])


def test_a_token_is_the_password_sent_with_xoauth2_by_default() -> None:
    from haclient.aio.physical import engine_config

    broker = BrokerURL("amqps", "a")
    options = ConnectionOptions(username="u", token_provider=lambda: "t")
    auth = engine_config(broker, options, "c", token="tok-1").auth
    assert auth is not None and (auth.password, auth.mechanisms) == ("tok-1", ("XOAUTH2",))
    with pytest.raises(ConfigurationError, match="token_provider needs a username"):
        engine_config(broker, ConnectionOptions(token_provider=lambda: "t"), "c", token="t")
    with pytest.raises(ConfigurationError, match="token_provider must be a callable"):
        ConnectionOptions(token_provider="not-callable")
    assert "token_provider='******'" in repr(ConnectionOptions(token_provider=lambda: "t"))


def test_an_applications_ssl_context_logs_in_by_certificate_only_without_credentials() -> None:
    import ssl

    from haclient.aio.physical import engine_config

    context = ssl.create_default_context()
    broker = BrokerURL("amqps", "a")

    def by_certificate(**keywords: Any) -> bool:
        auth = engine_config(broker, ConnectionOptions(ssl_context=context, **keywords), "c").auth
        assert auth is not None
        return auth.client_certificate

    assert by_certificate()
    assert not by_certificate(username="u", password="p")
    assert by_certificate(username="u", password="p", sasl_mechanisms="EXTERNAL,PLAIN")
    plain = engine_config(BrokerURL("amqp", "a"), ConnectionOptions(), "c").auth
    assert plain is not None and not plain.client_certificate


def test_only_broker_scoped_options_go_on_a_broker() -> None:
    broker_scoped = {o.name for o in CLIENT_OPTIONS if o.scope is Scope.BROKER}
    # The amqp.* options Qpid JMS reads per broker URI inside failover:(...), and TLS.
    transport = {o.name for o in CLIENT_OPTIONS if o.name and o.name.startswith("transport.")}
    assert len(transport) == 28  # and their aliases
    amqp = {o.name for o in CLIENT_OPTIONS if o.name and o.name.startswith("amqp.")}
    assert len(amqp) == 10
    sasl = {o.name for o in CLIENT_OPTIONS if o.name and o.name.startswith("sasl.options.")}
    assert len(sasl) == 3  # Qpid JMS's GSSAPI options
    assert broker_scoped == {*amqp, *transport, *sasl}
    with pytest.raises(ConfigurationError, match="applies to the whole connection") as info:
        parse_url("failover:(amqp://a?jms.prefetch=1)", options=CLIENT_OPTIONS)
    assert info.value.option == "jms.prefetch"


# --- Did you mean: one helper, in the URL and in keywords --------------------------------------


def test_a_misspelt_url_option_is_answered_with_the_nearest_name() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean jms\.prefetch\?") as info:
        parse_url("amqp://a?jms.prefech=1", options=CLIENT_OPTIONS)
    assert info.value.option == "jms.prefech"
    with pytest.raises(ConfigurationError, match=r"did you mean amqp\.idleTimeout\?"):
        parse_url("failover:(amqp://a?amqp.idleTimout=1)", options=CLIENT_OPTIONS)


def test_a_misspelt_keyword_is_answered_with_the_nearest_name() -> None:
    url = parse_url("amqp://a", options=CLIENT_OPTIONS)
    with pytest.raises(ConfigurationError, match=r"did you mean 'prefetch'\?") as info:
        ConnectionOptions.build(url, {"prefech": 1})
    assert info.value.option == "prefech"


def test_did_you_mean_folds_case_when_asked() -> None:
    error = unknown_option_error("BATCHSIZ", ["batchSize"], quote=True, fold=True)
    assert "did you mean 'batchSize'?" in str(error)
    assert "did you mean" not in str(unknown_option_error("zzz", ["batchSize"]))


# --- Validation names the option, whichever way it is given ------------------------------------


@pytest.mark.parametrize(
    ("keywords", "named"),
    [
        ({"prefetch": -1}, "prefetch"),
        ({"prefetch": True}, "prefetch"),
        ({"transactions": "xa"}, "transactions"),
        ({"idle_timeout": 0}, "idle_timeout"),
        ({"connect_timeout": float("inf")}, "connect_timeout"),
        ({"max_frame_size": 100}, "max_frame_size"),
        ({"ack_confirmation": "never"}, "ack_confirmation"),
        ({"dups_ok_batch": 0}, "dups_ok_batch"),
    ],
)
def test_bad_keyword_values_name_the_keyword(keywords: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ConnectionOptions.build(parse_url("amqp://a", options=CLIENT_OPTIONS), keywords)
    assert info.value.option == named
    assert str(info.value).startswith(named)


def test_kinds_say_what_they_accept() -> None:
    with pytest.raises(ValueError, match="at least 512"):
        WholeNumber(512).parse("511")
    with pytest.raises(ValueError, match="one of a, b"):
        Choice(("a", "b")).check("c")
    assert Choice(("a",), fold=True).parse("A") == "a"
    assert Duration("ms", zero_is_none=True).parse("0") is None
    assert Duration().parse("1500") == 1.5


def test_a_future_option_is_a_declaration() -> None:
    """An option accepted without effect (a Qpid JMS option not implemented) is one line."""
    table = OptionTable(
        [
            Option(
                "jms.prefetchPolicy.all",
                WholeNumber(0),
                1000,
                "Accepted for Qpid JMS URLs.",
                status=Status.ACCEPTED,
            )
        ]
    )
    assert table.check_url_option("jms.prefetchPolicy.all", "5") == 5
    with pytest.raises(ConfigurationError, match=r"did you mean jms\.prefetchPolicy\.all\?"):
        table.check_url_option("jms.prefetchPolicy.al", "5")


# --- One masker ----------------------------------------------------------------------------------


def test_secrets_are_masked_in_reprs_errors_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    text = "failover:(amqp://u:s3cret@a)?jms.password=hunter2&jms.prefetch=1"
    url = parse_url(text, options=CLIENT_OPTIONS)
    options = ConnectionOptions.build(url, {"password": "kw-secret"})
    with caplog.at_level(logging.DEBUG, logger="haclient"):
        logging.getLogger("haclient.test").info("connecting to %s with %r", url, options)
    shown = [
        repr(url),
        str(url),
        repr(options),
        mask_secrets(text, options=CLIENT_OPTIONS),
        caplog.text,
    ]
    shown.append(mask_option_values("jms.password=hunter2&jms.prefetch=1", CLIENT_OPTIONS))
    shown.append(str(masked({"jms.password": "hunter2", "password": "kw-secret"}, CLIENT_OPTIONS)))
    for text_shown in shown:
        for secret in ("s3cret", "hunter2", "kw-secret"):
            assert secret not in text_shown, text_shown
    assert MASK in repr(options) and "jms.prefetch=1" in mask_secrets(text, options=CLIENT_OPTIONS)


def test_a_bad_secret_value_is_not_quoted_in_the_error() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_url("failover:(amqp://a)x?jms.password=hunter2", options=CLIENT_OPTIONS)
    assert "hunter2" not in str(info.value)


if __name__ == "__main__":  # rewrite docs/api.md's generated tables (the failover one too)
    API_MD.write_text(docs_with_tables(API_MD.read_text()))
    sys.exit(0)


def test_a_time_with_a_part_of_a_millisecond_prints_rounded_up_never_as_zero() -> None:
    """URL text is whole milliseconds: 0.4 ms is 1 ms there (0 would read back as "off", or be
    refused), 1.0004 s is 1001 ms; whole milliseconds print exactly."""
    kind = Duration()
    assert [kind.format(v) for v in (0.0004, 1.0004, 0.007, 60.0)] == ["1", "1001", "7", "60000"]
    assert kind.parse(kind.format(0.0004)) == 0.001


@pytest.mark.parametrize(
    "value",
    ["PLAIN", "scram-sha-256, plain,PLAIN", ("EXTERNAL", "anonymous"), "PLAIN,NTLM", "", 7, ["x"]],
)
def test_the_url_reads_sasl_mechanisms_as_the_engine_does(value: Any) -> None:
    # The engine imports nothing of failover, so it reads ClientAuth.mechanisms itself.
    try:
        expected: Any = sasl_names(value)
    except ValueError as exc:
        expected = str(exc)
    try:
        got: Any = SASL_NAMES.check(value)
    except ValueError as exc:
        got = str(exc)
    assert got == expected
