"""``connect()`` and ``ConnectionFactory`` refuse a URL that is not a str with a
``ConfigurationError`` naming the argument, in both APIs (not an ``AttributeError`` from
somewhere inside)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import haclient
import haclient.aio as aio
from haclient.errors import ConfigurationError

NOT_URLS = [None, 123, b"amqp://127.0.0.1:5672", ["amqp://127.0.0.1:5672"]]


@pytest.mark.parametrize("url", NOT_URLS, ids=repr)
def test_blocking_connect_with_a_non_str_url_is_a_configuration_error(url: Any) -> None:
    with pytest.raises(ConfigurationError, match="url must be a str") as info:
        haclient.connect(url)
    assert info.value.option == "url"
    with pytest.raises(ConfigurationError, match="url must be a str"):
        haclient.ConnectionFactory(url)


@pytest.mark.anyio
@pytest.mark.parametrize("url", NOT_URLS, ids=repr)
async def test_async_connect_with_a_non_str_url_is_a_configuration_error(url: Any) -> None:
    with pytest.raises(ConfigurationError, match="url must be a str") as info:
        await aio.connect(url)
    assert info.value.option == "url"
    with pytest.raises(ConfigurationError, match="url must be a str"):
        aio.ConnectionFactory(url)


def test_a_parsed_url_is_accepted_as_it_is() -> None:
    url = aio.ConnectionFactory("amqp://127.0.0.1:5672").url
    assert aio.ConnectionFactory(url).url is url  # type: ignore[arg-type]


NOT_CLIENT_IDS = ["", 0, b"app"]
NOWHERE = "amqp://127.0.0.1:1"  # never reached: the id is refused before any connect


@pytest.mark.anyio
@pytest.mark.parametrize("client_id", NOT_CLIENT_IDS, ids=repr)
async def test_item2_an_empty_or_non_str_client_id_is_refused_everywhere(client_id: Any) -> None:
    attempts = [
        lambda: aio.connect(NOWHERE, client_id=client_id),
        lambda: aio.ConnectionFactory(NOWHERE).create_connection(client_id=client_id),
        lambda: aio.ConnectionFactory(NOWHERE, client_id=client_id).create_connection(),
    ]
    with anyio.fail_after(10):
        for attempt in attempts:
            with pytest.raises(ConfigurationError, match="client_id must be a non-empty str"):
                await attempt()
    with pytest.raises(ConfigurationError, match="client_id must be a non-empty str"):
        haclient.connect(NOWHERE, client_id=client_id)
    with pytest.raises(ConfigurationError, match="client_id must be a non-empty str"):
        haclient.ConnectionFactory(NOWHERE).create_connection(client_id=client_id)
    with pytest.raises(ConfigurationError, match=r"jms\.clientID"):
        await aio.connect(f"{NOWHERE}?jms.clientID=")
