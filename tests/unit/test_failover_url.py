"""Failover URLs: parsing, printing, round trips, secrets, the exchange list (F1, F5, F12)."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover.policy import FailoverMethod, FailoverPolicy
from failover.url import BrokerURL, FailoverURL, mask_secrets, merge_broker_lists, parse_url
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS

# --- Valid URLs ----------------------------------------------------------------------------------


def test_F1_plain_url_is_singlebroker_with_default_retries() -> None:
    url = parse_url("amqp://broker.example:5672", options=CLIENT_OPTIONS)
    assert url.brokers == (BrokerURL("amqp", "broker.example", 5672),)
    assert url.method is FailoverMethod.SINGLEBROKER
    assert url.policy == FailoverPolicy(method=FailoverMethod.SINGLEBROKER)
    assert url.connection_options == {}
    assert str(url) == "amqp://broker.example:5672"


def test_F1_nofailover() -> None:
    url = parse_url("failover:(amqp://a)?failover.method=nofailover", options=CLIENT_OPTIONS)
    assert url.method is FailoverMethod.NOFAILOVER
    assert list(url.policy.attempts(url.brokers, start_index=0)) == []


def test_failover_url_with_everything() -> None:
    url = parse_url(
        "failover:(amqp://a:5672,amqps://b:5671?amqp.idleTimeout=1000)"
        "?failover.method=roundrobin&failover.cyclecount=3&failover.retries=2"
        "&failover.connectdelay=500&jms.clientID=app-1&amqp.maxFrameSize=65536",
        options=CLIENT_OPTIONS,
    )
    assert url.brokers == (
        BrokerURL("amqp", "a", 5672),
        BrokerURL("amqps", "b", 5671, options={"amqp.idleTimeout": "1000"}, table=CLIENT_OPTIONS),
    )
    # A URL with its own delays gets exactly them: no fast phase, no jitter.
    own = {"fast_period": 0.0, "jitter": 0.0}
    assert url.policy == FailoverPolicy(retries=2, cyclecount=3, connect_delay=0.5, **own)
    assert url.connection_options == {"jms.clientID": "app-1", "amqp.maxFrameSize": "65536"}
    assert url.broker_options(1) == {
        "jms.clientID": "app-1",
        "amqp.maxFrameSize": "65536",
        "amqp.idleTimeout": "1000",
    }


def test_failover_url_defaults_to_roundrobin_even_for_one_broker() -> None:
    assert (
        parse_url("failover:(amqp://a)", options=CLIENT_OPTIONS).method is FailoverMethod.ROUNDROBIN
    )
    assert (
        parse_url("FAILOVER:(amqp://a,amqp://b)", options=CLIENT_OPTIONS).method
        is FailoverMethod.ROUNDROBIN
    )


def test_qpid_jms_url_works_unchanged() -> None:
    # The example of Qpid JMS's configuration guide, plus a nested option.
    url = parse_url(
        "failover:(amqp://host1:5672,amqp://host2:5672)?jms.clientID=foo"
        "&failover.maxReconnectAttempts=20&failover.reconnectDelay=10"
        "&failover.useReconnectBackOff=true&failover.nested.amqp.idleTimeout=30000",
        options=CLIENT_OPTIONS,
    )
    assert url.policy == FailoverPolicy(
        cyclecount=20, connect_delay=0.01, backoff=2.0, fast_period=0.0, jitter=0.0
    )
    assert url.connection_options == {"jms.clientID": "foo", "amqp.idleTimeout": "30000"}
    again = parse_url(str(url), options=CLIENT_OPTIONS)
    assert again == url
    assert "failover.nested" not in str(url)


def test_default_ports_and_scheme_case() -> None:
    url = parse_url("failover:(AMQP://a,amqps://b)", options=CLIENT_OPTIONS)
    assert [b.port for b in url.brokers] == [5672, 5671]
    assert [b.scheme for b in url.brokers] == ["amqp", "amqps"]
    assert [b.secure for b in url.brokers] == [False, True]
    assert url.brokers[1].address == ("b", 5671)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("amqp://[::1]:5673", "::1", 5673),
        ("amqp://[::1]", "::1", 5672),
        ("amqps://[2001:db8::7]", "2001:db8::7", 5671),
        ("amqp://127.0.0.1:1", "127.0.0.1", 1),
        ("amqp://my_host-1.example.org:65535", "my_host-1.example.org", 65535),
        ("amqp://localhost/", "localhost", 5672),
        ("amqp://[fe80::1%25eth0]:5", "fe80::1%eth0", 5),
    ],
)
def test_hosts(text: str, host: str, port: int) -> None:
    (broker,) = parse_url(text, options=CLIENT_OPTIONS).brokers
    assert (broker.host, broker.port) == (host, port)
    assert parse_url(str(broker), options=CLIENT_OPTIONS).brokers == (broker,)


def test_userinfo_is_percent_decoded_and_masked() -> None:
    url = parse_url(
        "failover:(amqp://us%40er:p%3As%2Fs@a)?jms.password=hunter2", options=CLIENT_OPTIONS
    )
    (broker,) = url.brokers
    assert (broker.username, broker.password) == ("us@er", "p:s/s")
    for text in (repr(url), str(url), repr(broker), str(broker)):
        assert "p:s/s" not in text and "p%3As%2Fs" not in text
        assert "hunter2" not in text
    assert "******" in str(url)
    secret = url.to_string(include_secrets=True)
    assert "p%3As%2Fs" in secret and "jms.password=hunter2" in secret
    assert parse_url(secret, options=CLIENT_OPTIONS) == url


def test_username_without_password() -> None:
    (broker,) = parse_url("amqp://guest@a", options=CLIENT_OPTIONS).brokers
    assert (broker.username, broker.password) == ("guest", None)
    (broker,) = parse_url("amqp://guest:@a", options=CLIENT_OPTIONS).brokers
    assert (broker.username, broker.password) == ("guest", "")


def test_option_values_are_percent_decoded() -> None:
    url = parse_url("amqp://a?jms.clientID=app%26co%3D1", options=CLIENT_OPTIONS)
    assert url.connection_options["jms.clientID"] == "app&co=1"
    assert parse_url(str(url), options=CLIENT_OPTIONS) == url


def test_plain_url_keeps_failover_options() -> None:
    url = parse_url("amqp://a?failover.retries=5&jms.prefetch=0", options=CLIENT_OPTIONS)
    assert url.policy == FailoverPolicy(method=FailoverMethod.SINGLEBROKER, retries=5)
    assert str(url) == "amqp://a:5672?failover.retries=5&jms.prefetch=0"


def test_canonical_failover_form() -> None:
    url = parse_url(
        "failover:(amqp://b,amqp://a:1)?jms.selectors=client&failover.cyclecount=2",
        options=CLIENT_OPTIONS,
    )
    assert str(url) == (
        "failover:(amqp://b:5672,amqp://a:1)"
        "?failover.method=roundrobin&failover.cyclecount=2&jms.selectors=client"
    )


def test_values_are_frozen_and_hashable() -> None:
    url = parse_url("failover:(amqp://a?amqp.idleTimeout=5)?jms.clientID=x", options=CLIENT_OPTIONS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        url.policy = FailoverPolicy()  # type: ignore[misc]
    with pytest.raises(TypeError):
        url.connection_options["jms.clientID"] = "y"  # type: ignore[index]
    with pytest.raises(TypeError):
        url.brokers[0].options["amqp.idleTimeout"] = "6"  # type: ignore[index]
    assert hash(url) == hash(parse_url(str(url), options=CLIENT_OPTIONS))
    assert len({url, parse_url(str(url), options=CLIENT_OPTIONS)}) == 1


def test_with_brokers() -> None:
    url = parse_url("failover:(amqp://a)?failover.method=exchange", options=CLIENT_OPTIONS)
    new = url.with_brokers([BrokerURL("amqp", "x"), BrokerURL("amqps", "y")])
    assert [b.host for b in new.brokers] == ["x", "y"]
    assert new.policy == url.policy
    with pytest.raises(ConfigurationError):
        url.with_brokers([])


# --- Invalid URLs: every error names the option or the part ------------------------------------

INVALID = [
    ("", "url"),
    ("   ", "url"),
    ("failover:()", "brokers"),
    ("failover:(amqp://a,)", "brokers"),
    ("failover:(,amqp://a)", "brokers"),
    ("failover:amqp://a", "parentheses"),
    ("failover:(amqp://a", "parentheses"),
    ("failover:(amqp://a))", "parentheses"),
    ("failover:(amqp://a)(", "parentheses"),
    ("failover:(amqp://a)x", "parentheses"),
    ("failover:(amqp://a)?jms.clientID=a)b", "parentheses"),
    ("http://a", "scheme"),
    ("failover:(amqp://a,amqpws://b)", "scheme"),
    ("a:5672", "scheme"),
    ("amqp://", "host"),
    ("amqp://:5672", "host"),
    ("amqp://a b", "host"),
    ("amqp://-a", "host"),
    ("amqp://::1", "host"),
    ("amqp://[::1", "host"),
    ("amqp://[nothost]", "host"),
    ("amqp://[::1]x", "host"),
    ("amqp://a:0", "port"),
    ("amqp://a:65536", "port"),
    ("amqp://a:99999999", "port"),
    ("amqp://a:", "port"),
    ("amqp://a:x", "port"),
    ("amqp://a:-1", "port"),
    ("amqp://a/vhost", "path"),
    ("amqp://a#frag", "fragment"),
    ("amqp://@a", "username"),
    ("amqp://:pw@a", "username"),
    ("amqp://a?", "options"),
    ("amqp://a?=1", "options"),
    ("amqp://a?jms.clientID", "jms.clientID"),
    ("amqp://a?jms.clientID=x&jms.clientID=x", "jms.clientID"),
    ("amqp://a?jms.clientID=%ff", "jms.clientID"),
    ("amqp://a?jms.clientID=", "jms.clientID"),
    ("amqp://a?jms.clientId=x", "jms.clientId"),
    ("amqp://a?transport.tcpNoDelai=true", "transport.tcpNoDelai"),
    ("amqp://a?amqp.idleTimeout=-1", "amqp.idleTimeout"),
    ("amqp://a?amqp.idleTimeout=1.5", "amqp.idleTimeout"),
    ("amqp://a?amqp.maxFrameSize=511", "amqp.maxFrameSize"),
    ("amqp://a?jms.prefetch=-1", "jms.prefetch"),
    ("amqp://a?jms.prefetch=many", "jms.prefetch"),
    ("amqp://a?jms.transactions=xa", "jms.transactions"),
    ("amqp://a?jms.selectors=server", "jms.selectors"),
    ("amqp://a?failover.method=failover_exchange", "failover.method"),
    ("amqp://a?failover.retries=0", "failover.retries"),
    ("amqp://a?failover.cyclecount=three", "failover.cyclecount"),
    ("amqp://a?failover.connectdelay=-1", "failover.connectdelay"),
    ("amqp://a?failover.maxdelay=1e9", "failover.maxdelay"),
    ("amqp://a?failover.timeout=0", "failover.timeout"),
    ("amqp://a?failover.backoff=0.9", "failover.backoff"),
    ("amqp://a?failover.reconnectDelay=5&failover.connectdelay=6", "failover.connectdelay"),
    ("failover:(amqp://a,amqp://b)?failover.method=singlebroker", "failover.method"),
    ("failover:(amqp://a?jms.clientID=x)", "jms.clientID"),
    ("failover:(amqp://a?failover.retries=2)", "failover.retries"),
    ("failover:(amqp://a?amqp.idleTimeout=x)", "amqp.idleTimeout"),
    ("failover:(amqp://a?amqp.vhostname=x)", "amqp.vhostname"),
    ("failover:(amqp://a)?failover.nested.transport.x=1", "failover.nested.transport.x"),
    (
        "failover:(amqp://a)?failover.nested.amqp.idleTimeout=1&amqp.idleTimeout=2",
        "amqp.idleTimeout",
    ),
    (
        "failover:(amqp://a)?amqp.idleTimeout=2&failover.nested.amqp.idleTimeout=1",
        "failover.nested.amqp.idleTimeout",
    ),
]


@pytest.mark.parametrize(("text", "option"), INVALID)
def test_invalid_urls_name_the_option(text: str, option: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_url(text, options=CLIENT_OPTIONS)
    assert info.value.option == option
    assert isinstance(info.value, ValueError)
    if "." in option:  # an option (not a part of the URL) is named in the message too
        assert option in str(info.value)


def test_unknown_option_suggests_the_nearest_name() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean jms\.clientID\?"):
        parse_url("amqp://a?jms.clientId=x", options=CLIENT_OPTIONS)


def test_nested_and_direct_option_may_agree() -> None:
    url = parse_url(
        "failover:(amqp://a)?failover.nested.amqp.idleTimeout=1&amqp.idleTimeout=1",
        options=CLIENT_OPTIONS,
    )
    assert url.connection_options == {"amqp.idleTimeout": "1"}


def test_not_a_string() -> None:
    with pytest.raises(ConfigurationError):
        parse_url(b"amqp://a", options=CLIENT_OPTIONS)  # type: ignore[arg-type]


def test_constructors_validate() -> None:
    with pytest.raises(ConfigurationError) as info:
        BrokerURL("amqp", "a", 70000)
    assert info.value.option == "port"
    with pytest.raises(ConfigurationError) as info:
        BrokerURL("tcp", "a")
    assert info.value.option == "scheme"
    with pytest.raises(ConfigurationError) as info:
        BrokerURL("amqp", "a", options={"jms.prefetch": "1"}, table=CLIENT_OPTIONS)
    assert info.value.option == "jms.prefetch"
    with pytest.raises(ConfigurationError) as info:
        FailoverURL((BrokerURL("amqp", "a"),), connection_options={"x": "1"})
    assert info.value.option == "x"
    with pytest.raises(ConfigurationError) as info:
        FailoverURL(())
    assert info.value.option == "brokers"


# --- Round trips (Hypothesis) ------------------------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([a-z0-9_-]{0,8}[a-z0-9])?", fullmatch=True)
hosts = (
    st.lists(_label, min_size=1, max_size=3).map(".".join)
    | st.ip_addresses(v=4).map(str)
    | st.ip_addresses(v=6).map(str)
)
secrets_ = st.text(max_size=12)
ints_from = {
    "amqp.idleTimeout": st.integers(0, 10**6),
    "amqp.maxFrameSize": st.integers(512, 2**32 - 1),
}
broker_options = st.dictionaries(
    st.sampled_from(sorted(ints_from)), st.just(0), max_size=2
).flatmap(
    lambda d: st.fixed_dictionaries({k: ints_from[k].map(str) for k in d}) if d else st.just({})
)
brokers = st.builds(
    BrokerURL,
    scheme=st.sampled_from(["amqp", "amqps"]),
    host=hosts,
    port=st.none() | st.integers(1, 65535),
    username=st.none() | st.text(min_size=1, max_size=12),
    options=broker_options,
    table=st.just(CLIENT_OPTIONS),
).flatmap(
    lambda b: (st.none() if b.username is None else st.none() | secrets_).map(
        lambda pw: dataclasses.replace(b, password=pw)
    )
)
connection_options = st.fixed_dictionaries(
    {},
    optional={
        "amqp.idleTimeout": st.integers(0, 10**6).map(str),
        "jms.clientID": st.text(min_size=1, max_size=12),
        "jms.username": st.text(max_size=12),
        "jms.password": secrets_,
        "jms.prefetch": st.integers(0, 10**4).map(str),
        "jms.transactions": st.sampled_from(["native", "emulate"]),
        "jms.selectors": st.sampled_from(["auto", "broker", "client"]),
    },
)
ms = st.integers(0, 10**6).map(lambda v: v / 1000)
policies = st.builds(
    FailoverPolicy,
    method=st.sampled_from(FailoverMethod),
    retries=st.none() | st.integers(1, 50),
    cyclecount=st.none() | st.integers(0, 50),
    startup_cyclecount=st.none() | st.integers(0, 50),
    give_up_after=st.none() | st.integers(1, 10**6).map(lambda v: v / 1000),
    initial_delay=ms,
    fast_delay=st.integers(1, 10**5).map(lambda v: v / 1000),
    fast_period=ms,
    connect_delay=ms,
    backoff=st.integers(10, 40).map(lambda v: v / 10),
    max_delay=ms,
    jitter=ms,
    timeout=st.none() | st.integers(1, 10**6).map(lambda v: v / 1000),
    exchange_address=st.text(min_size=1, max_size=16),
    randomize=st.booleans(),
    warn_after_attempts=st.integers(-2, 50),
)


@st.composite
def failover_urls(draw: st.DrawFn) -> FailoverURL:
    policy = draw(policies)
    count = 1 if policy.method is FailoverMethod.SINGLEBROKER else draw(st.integers(1, 4))
    options = draw(connection_options)
    return FailoverURL(tuple(draw(brokers) for _ in range(count)), policy, options, CLIENT_OPTIONS)


@given(failover_urls())
def test_round_trip(url: FailoverURL) -> None:
    text = url.to_string(include_secrets=True)
    assert parse_url(text, options=CLIENT_OPTIONS) == url
    assert parse_url(text, options=CLIENT_OPTIONS).to_string(include_secrets=True) == text


@given(failover_urls())
def test_masked_text_parses_and_hides_secrets(url: FailoverURL) -> None:
    masked = parse_url(str(url), options=CLIENT_OPTIONS)
    assert masked.policy == url.policy
    assert [(b.host, b.port, b.username) for b in masked.brokers] == [
        (b.host, b.port, b.username) for b in url.brokers
    ]
    for broker in masked.brokers:
        assert broker.password in (None, "******")
    assert masked.connection_options.get("jms.password") in (None, "******")
    if all(b.password is None for b in url.brokers) and "jms.password" not in (
        url.connection_options
    ):
        assert masked == url


@given(failover_urls())
def test_pickle_round_trip(url: FailoverURL) -> None:
    assert pickle.loads(pickle.dumps(url)) == url


@given(brokers)
def test_broker_round_trip(broker: BrokerURL) -> None:
    (again,) = parse_url(
        "failover:(" + broker.to_string(include_secrets=True) + ")", options=CLIENT_OPTIONS
    ).brokers
    assert again == broker


# --- The exchange list (F12) -----------------------------------------------------------------


def test_F12_merge_puts_advertised_first_and_keeps_the_seed() -> None:
    a, b, c = BrokerURL("amqp", "a"), BrokerURL("amqp", "b"), BrokerURL("amqp", "c")
    assert merge_broker_lists([a, b], [c, b, BrokerURL("amqp", "C")], secure=False) == (c, b, a)
    assert merge_broker_lists([a], [], secure=False) == (a,)


def test_F12_merge_refuses_a_downgrade_to_plain_amqp() -> None:
    seed = [BrokerURL("amqps", "a")]
    plain, tls = BrokerURL("amqp", "x"), BrokerURL("amqps", "x")
    assert merge_broker_lists(seed, [plain, tls], secure=True) == (tls, seed[0])
    assert merge_broker_lists(seed, [plain], secure=False) == (plain, seed[0])


# --- No password in any error or repr, malformed URLs included --------------------------------

_MALFORMED_WITH_SECRETS = [
    "amqp//app:s3cret@127.0.0.1:5672",
    "amqp:/app:s3cret@127.0.0.1:5672",
    "app:s3cret@127.0.0.1:5672",
    "bogus://app:s3cret@127.0.0.1:5672",
    "amqp://app:s3/cret@127.0.0.1:5672",
    "amqp://app:s3?cret@127.0.0.1:5672",
    "amqp://app:s3#cret@127.0.0.1:5672",
    "failover:(amqp://app:s3,cret@127.0.0.1:5672)",
    "failover:(amqp://app:s3)cret@127.0.0.1:5672)",
    "failover:(amqp://a:5672)x?jms.password=s3cret",
    "amqp://app:s3cret@127.0.0.1:99999",
]


@pytest.mark.parametrize("url", _MALFORMED_WITH_SECRETS)
def test_item4_url_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_url(url, options=CLIENT_OPTIONS)
    chained = (caught.value.__cause__, caught.value.__context__)
    for text in (str(caught.value), repr(caught.value), *(repr(e) for e in chained if e)):
        assert "s3" not in text and "cret" not in text, text
    assert "s3" not in mask_secrets(url, options=CLIENT_OPTIONS) and "cret" not in mask_secrets(
        url, options=CLIENT_OPTIONS
    )


def test_item4_connect_with_a_malformed_url_never_shows_the_password() -> None:
    import haclient

    with pytest.raises(ConfigurationError) as caught:
        haclient.connect("amqp//app:s3cret@127.0.0.1:5672")
    assert "s3cret" not in str(caught.value) and "app:******@" in str(caught.value)


@given(st.text(alphabet="/?#,()@:&= %x", min_size=0, max_size=8))
def test_item4_any_password_is_masked_in_errors_and_by_the_masker(middle: str) -> None:
    secret = f"QQQ{middle}ZZZ"
    for url in (
        f"amqp://app:{secret}@127.0.0.1:5672",
        f"failover:(amqp://app:{secret}@127.0.0.1:5672,amqp://b:5673)?jms.prefetch=1",
        f"amqp//app:{secret}@127.0.0.1:5672",
        # an '&' ends a query value whatever it meant: only there must it be encoded
        f"failover:(amqp://h:1)?jms.password={secret.replace('&', '%26')}&jms.prefetch=1",
    ):
        try:
            shown = str(parse_url(url, options=CLIENT_OPTIONS))
        except ConfigurationError as exc:
            shown = f"{exc} {exc!r} {exc.option}"
        shown += mask_secrets(url, options=CLIENT_OPTIONS)
        assert "QQQ" not in shown and "ZZZ" not in shown, (url, shown)


@pytest.mark.parametrize("password", ["QQ)ZZ", "QQ(ZZ", "QQ,ZZ", "QQ@ZZ", "QQ/ZZ"])
def test_item4_spark_options_repr_masks_as_parse_url_does(password: str) -> None:
    from haclient.spark.options import SparkOptions

    url = f"amqp://u:{password}@h:5672"
    try:
        shown = repr(SparkOptions.parse({"url": url, "address": "q"}))
    except ConfigurationError as exc:  # checked at planning: refused, masked
        shown = f"{exc} {exc!r}"
    assert "QQ" not in shown and "ZZ" not in shown, shown
    assert mask_secrets(url, options=CLIENT_OPTIONS) in shown


# --- Issue 39: two names of one option, and what a URL cannot mean -----------------------------

_ALIAS_PAIRS = [
    ("transport.trustStoreLocation", "transport.caFile", "/a.pem", "/b.pem"),
    ("jms.prefetch", "jms.prefetchPolicy.all", "10", "20"),
    ("transport.certFile", "transport.keyStoreLocation", "/c.pem", "/k.pem"),
    ("transport.keyPassword", "transport.keyStorePassword", "pw1", "pw2"),
]


@pytest.mark.parametrize(("first", "second", "one", "other"), _ALIAS_PAIRS)
def test_item2_two_names_of_one_option_with_different_values_raise_naming_both(
    first: str, second: str, one: str, other: str
) -> None:
    for text in (
        f"amqp://h:5672?{first}={one}&{second}={other}",
        f"failover:(amqp://h:5672)?{second}={other}&{first}={one}",
    ):
        with pytest.raises(ConfigurationError) as caught:
            parse_url(text, options=CLIENT_OPTIONS)
        assert first in str(caught.value) and second in str(caught.value), caught.value
        assert "pw1" not in str(caught.value) and "pw2" not in str(caught.value)
    if "transport." in first:  # per-broker options: on one broker URL too
        with pytest.raises(ConfigurationError, match=first):
            parse_url(
                f"failover:(amqp://h:5672?{first}={one}&{second}={other})", options=CLIENT_OPTIONS
            )


@pytest.mark.parametrize(("first", "second", "one", "other"), _ALIAS_PAIRS)
def test_item2_two_names_of_one_option_that_agree_are_one_value(
    first: str, second: str, one: str, other: str
) -> None:
    url = parse_url(f"amqp://h:5672?{first}={one}&{second}={one}", options=CLIENT_OPTIONS)
    assert url.connection_options == {first: one, second: one}


def test_item2_a_broker_option_still_overrides_the_connections_under_another_name() -> None:
    url = parse_url(
        "failover:(amqps://h:5671?transport.caFile=/b.pem)?transport.trustStoreLocation=/a.pem",
        options=CLIENT_OPTIONS,
    )
    assert url.broker_options(0)["transport.caFile"] == "/b.pem"


def test_F16_priority_uris_naming_no_broker_of_the_list_are_refused_when_parsed() -> None:
    with pytest.raises(ConfigurationError, match="priorityURIs") as caught:
        parse_url(
            "failover:(amqp://a:5672,amqp://b:5672)"
            "?failover.priorityBackup=true&failover.priorityURIs=amqp://c:5672",
            options=CLIENT_OPTIONS,
        )
    assert caught.value.option == "failover.priorityURIs"
    with pytest.raises(ConfigurationError, match="priorityURIs"):
        parse_url(
            "failover:(amqp://a:5672)?failover.priorityURIs=amqp://a:x", options=CLIENT_OPTIONS
        )
    ok = parse_url(
        "failover:(amqp://a:5672,amqp://b:5672)?failover.priorityURIs=tcp://b:5672",
        options=CLIENT_OPTIONS,
    )
    assert ok.policy.priority_uris == ("tcp://b:5672",)


def test_F16_a_connection_factory_refuses_them_before_any_connect() -> None:
    import haclient
    import haclient.aio

    url = "failover:(amqp://a:5672)?failover.priorityBackup=true&failover.priorityURIs=c:1"
    for factory in (haclient.ConnectionFactory, haclient.aio.ConnectionFactory):
        with pytest.raises(ConfigurationError, match="priorityURIs"):
            factory(url)


@pytest.mark.parametrize(
    ("text", "option"),
    [
        ("amqp://u:pw@@host:5672", "password"),
        ("amqp://u@x:pw@host:5672", "username"),
        ("failover:(amqp://u:pw@@host:5672)", "password"),
        ("amqp://u:p%zzw@host:5672", "password"),
        ("amqp://u%zz:pw@host:5672", "username"),
        ("amqp://u:pw%4@host:5672", "password"),
        ("amqp://h:5672?jms.clientID=a%zz", "jms.clientID"),
    ],
)
def test_item4_an_at_sign_or_a_bad_escape_in_the_user_info_is_refused(
    text: str, option: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_url(text, options=CLIENT_OPTIONS)
    assert caught.value.option == option
    shown = f"{caught.value} {caught.value!r}"
    assert "pw" not in shown.replace("password", ""), shown


def test_item4_an_encoded_at_sign_and_percent_are_still_read() -> None:
    broker = parse_url("amqp://u%40x:p%40w%25@host:5672", options=CLIENT_OPTIONS).brokers[0]
    assert (broker.username, broker.password, broker.host) == ("u@x", "p@w%", "host")


@pytest.mark.parametrize("text", ["amqp://u@x:QQpwZZ@host:5672", "amqp://u:QQpw@@host:5672"])
def test_item4_the_masker_hides_a_password_after_an_unencoded_at_sign(text: str) -> None:
    assert "QQ" not in mask_secrets(text, options=CLIENT_OPTIONS) and "ZZ" not in mask_secrets(
        text, options=CLIENT_OPTIONS
    )


# --- No registry filled by imports (issue 38 item 5) -------------------------------------------

_CLIENT_URL = "failover:(amqp://a:5672,amqp://b:5672)?jms.prefetchPolicy.all=7"


def _answer_in_a_fresh_process(statements: str) -> str:
    """What a fresh interpreter prints for ``failover.url.parse_url(_CLIENT_URL)`` after
    ``statements``: the URL, or the error's class and message."""
    probe = (
        "import failover.url\n"
        f"{statements}\n"
        "try:\n"
        f"    print(failover.url.parse_url({_CLIENT_URL!r}))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()


def test_a_parse_gives_the_same_answer_whatever_was_imported_before() -> None:
    """``failover`` alone knows the ``failover.*`` options only: a client option is unknown
    to it before ``import haclient`` and after, since importing registers nothing."""
    alone = _answer_in_a_fresh_process("")
    after_haclient = _answer_in_a_fresh_process("import haclient, haclient.options")
    assert alone == after_haclient == "ConfigurationError unknown option 'jms.prefetchPolicy.all'"


def test_given_the_client_table_the_parse_knows_the_client_options() -> None:
    url = parse_url(_CLIENT_URL, options=CLIENT_OPTIONS)
    assert url.connection_options == {"jms.prefetchPolicy.all": "7"}
    assert url.table is CLIENT_OPTIONS
    with pytest.raises(ConfigurationError, match=r"unknown option 'jms\.prefetchPolicy\.all'"):
        parse_url(_CLIENT_URL)


def test_a_url_masks_by_its_own_table_even_after_a_pickle() -> None:
    url = parse_url("amqp://h?jms.password=s3cret", options=CLIENT_OPTIONS)
    copy = pickle.loads(pickle.dumps(url))
    assert copy == url and copy.table.is_secret("jms.password")
    assert "s3cret" not in str(copy) and "s3cret" not in repr(copy)
    assert (
        mask_secrets("amqp://h?jms.password=s3cret&x", options=CLIENT_OPTIONS).count("s3cret") == 0
    )
