"""Where a broker's connection redirect sends the client, and whether it may go (F18).

How this works: a broker may close a connection, or refuse its Open, with the condition
``amqp:connection:redirect`` and the target in the info map: ``network-host``, ``port``, and
optionally ``hostname`` (the virtual host of the new Open), ``scheme`` (``amqp``/``amqps``).
``resolved`` turns such a ``RedirectError`` into one whose ``redirect_to`` is the target as a
``BrokerURL`` (same credentials and per-broker options as the broker that redirected, as Qpid
JMS's ``AmqpRedirect.toURI`` keeps the URI's options), which the failover walk tries next; or
into one that says why it is not followed, so failover tries the next broker as it would
without a redirect. Qpid JMS 1.x decides the same way (``AmqpRedirect.validate``):

- no ``network-host``, or a ``port`` that is not a number: garbled, not followed;
- a ``scheme`` other than ``amqp``/``amqps`` (Qpid JMS also knows its WebSocket schemes,
  which this client has not): not followed;
- an ``amqp`` target from an ``amqps`` connection: a downgrade to plain TCP, not followed
  unless ``amqp.allowNonSecureRedirects=true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from failover.url import BrokerURL
from haclient.amqp.conditions import RedirectError
from haclient.errors import ConfigurationError

__all__ = ["CONNECTION_REDIRECT", "redirect_target", "resolved"]

CONNECTION_REDIRECT = "amqp:connection:redirect"
_SCHEMES = ("amqp", "amqps")


def redirect_target(
    info: Mapping[str, Any] | None, broker: BrokerURL, *, allow_non_secure: bool
) -> BrokerURL:
    """The broker a redirect from ``broker`` with ``info`` sends the connection to.

    Raises:
        ValueError: The redirect cannot be followed; the message says why.
    """
    info = info or {}
    host = info.get("network-host")
    if not isinstance(host, str) or not host:
        raise ValueError("the redirect names no network-host")
    try:
        port = int(str(info.get("port")))
    except ValueError:
        raise ValueError(f"the redirect's port {info.get('port')!r} is not a number") from None
    scheme = info.get("scheme") or broker.scheme
    if scheme not in _SCHEMES:
        raise ValueError(f"the redirect's scheme {scheme!r} is not amqp or amqps")
    if broker.secure and scheme != "amqps" and not allow_non_secure:
        raise ValueError(
            f"it would leave TLS for plain TCP ({scheme}://{host}:{port}); "
            "amqp.allowNonSecureRedirects=true allows that"
        )
    options = dict(broker.options)
    vhost = info.get("hostname")
    if isinstance(vhost, str) and vhost:
        options["amqp.vhost"] = vhost  # the Open's host on the target, as Qpid JMS sets it
    try:
        return replace(broker, scheme=scheme, host=host, port=port, options=options)
    except ConfigurationError as exc:
        raise ValueError(f"the redirect's target is not a broker URL: {exc}") from None


def resolved(error: RedirectError, broker: BrokerURL, *, allow_non_secure: bool) -> RedirectError:
    """``error`` (a redirect ``broker`` sent) with ``redirect_to`` set when it may be
    followed; else a ``RedirectError`` saying why not (retriable: the next broker is tried).
    A link redirect is returned as it is."""
    if error.condition != CONNECTION_REDIRECT or error.redirect_to is not None:
        return error
    try:
        target = redirect_target(error.info, broker, allow_non_secure=allow_non_secure)
    except ValueError as why:
        return RedirectError(
            f"{broker} redirected the connection; not followed: {why}",
            condition=error.condition,
            description=error.description,
            info=error.info,
        )
    error.redirect_to = target
    return error
