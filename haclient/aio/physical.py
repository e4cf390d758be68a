"""One physical connection to one broker, as the logical ``Connection`` uses it.

How this works: ``open_physical`` opens the socket and the AMQP connection
(``haclient.amqp.connect_amqp``), whose driver runs as one task of the logical connection's task
group until ``close()`` is called or the connection ends, and hands back a
``PhysicalConnection`` once the broker's Open has arrived. This is the *connector* the failover
manager is given: it opens one connection to one broker URL and knows nothing of sessions or
failover.

It also reads what the broker told us in its Open: the address prefixes (``queue-prefix``,
``topic-prefix``, as ActiveMQ announces them) and the product, which decides the defaults for a
broker that announces nothing (RabbitMQ wants ``/queue/`` and ``/topic/`` addresses and ends the
session on a receiver settle mode ``second`` request, see ``settle_second``).
"""

from __future__ import annotations

import inspect
import ipaddress
import logging
import socket
import struct
from dataclasses import replace
from typing import Any

import anyio
from anyio.abc import TaskGroup

from failover.url import BrokerURL
from haclient.aio.confirm import fallback_for
from haclient.aio.options import ConnectionOptions
from haclient.aio.redirect import resolved
from haclient.aio.tls_options import tls_client_options
from haclient.amqp.conditions import RedirectError
from haclient.amqp.config import (
    CLEAR_TEXT_MECHANISMS,
    ClientAuth,
    EngineConfig,
    TlsClientOptions,
)
from haclient.amqp.connection import AmqpConnection, SocketOption, connect_amqp
from haclient.amqp.sasl import NO_MECHANISM
from haclient.amqp.types import SASL_FAILED, TLS_FAILED
from haclient.destination import (
    NO_PREFIXES,
    QUEUE_PREFIX_PROPERTY,
    TOPIC_PREFIX_PROPERTY,
    DestinationPrefixes,
)
from haclient.errors import AuthenticationError, ConfigurationError, HAClientError

__all__ = ["PhysicalConnection", "engine_config", "fresh_token", "open_physical"]

log = logging.getLogger("haclient.connection")

_RABBITMQ_PREFIXES = DestinationPrefixes(queue="/queue/", topic="/topic/")
SHARED_SUBS = "SHARED-SUBS"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def engine_config(
    broker: BrokerURL, options: ConnectionOptions, container_id: str, *, token: str | None = None
) -> EngineConfig:
    """The engine configuration for one broker of a logical connection.

    Args:
        token: The token ``options.token_provider`` returned for this connect: the password,
            sent with XOAUTH2 unless ``sasl_mechanisms`` says otherwise.

    Raises:
        ConfigurationError: A token without a username, or TLS options that cannot be used
            (``haclient.aio.tls_options``).
    """
    options = options.for_broker(broker)  # the broker URL's own options win for it
    tls = tls_client_options(options) if broker.secure else None
    username = broker.username or options.username
    password = broker.password if broker.username else options.password
    mechanisms = options.sasl_mechanisms
    if token is not None:
        if not username:
            raise ConfigurationError("token_provider needs a username (XOAUTH2 sends it)")
        password = token
        mechanisms = mechanisms or ("XOAUTH2",)
    auth = ClientAuth(
        username,
        password,
        mechanisms,
        allow_insecure=not broker.secure,
        client_certificate=_may_log_in_by_certificate(tls, username, mechanisms),
    )
    readable = CLEAR_TEXT_MECHANISMS.intersection(auth.allowed)
    if username and readable and not broker.secure and not _is_loopback(broker.host):
        log.warning(
            "the password for %r may go in clear text to %s (SASL %s over a plain socket): use "
            "amqps, or amqp.saslMechanisms=SCRAM-SHA-256",
            username,
            broker,
            " or ".join(sorted(readable)),
        )
    if tls is not None and options.vhost and tls.peer_name is None:
        tls = replace(tls, peer_name=broker.host)  # amqp.vhost names the Open's host, not TLS's
    return EngineConfig(
        container_id=container_id,
        hostname=options.vhost or broker.host,
        idle_timeout=options.idle_timeout,
        max_frame_size=options.max_frame_size,
        desired_capabilities=(SHARED_SUBS,),
        auth=auth if options.sasl_layer else None,
        tls=tls,
        trace_frames=options.trace_frames,
    )


def socket_options(options: ConnectionOptions) -> list[SocketOption]:
    """The ``setsockopt`` calls the ``transport.*`` socket options ask (``options`` already for
    the broker): TCP_NODELAY always (on by default), the others only when given."""
    out: list[SocketOption] = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(options.tcp_no_delay))]
    if options.tcp_keep_alive:
        out.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    if options.send_buffer_size is not None:
        out.append((socket.SOL_SOCKET, socket.SO_SNDBUF, options.send_buffer_size))
    if options.receive_buffer_size is not None:
        out.append((socket.SOL_SOCKET, socket.SO_RCVBUF, options.receive_buffer_size))
    if options.so_linger is not None:
        linger = struct.pack("ii", 1, options.so_linger)
        out.append((socket.SOL_SOCKET, socket.SO_LINGER, linger))
    if options.traffic_class is not None:
        out.append((socket.IPPROTO_IP, socket.IP_TOS, options.traffic_class))
    return out


async def fresh_token(options: ConnectionOptions) -> str | None:
    """The token of ``options.token_provider`` for one connect (None: no provider).

    An async provider is awaited; a plain one runs in a worker thread, since it may block (a
    file, an HTTP call to the identity provider) and the event loop serves other connections.
    Fetching the token is part of the login, so ``connect_timeout`` bounds it: a provider
    still busy then is abandoned (an async one cancelled, a plain one's thread left to end on
    its own) and the connect fails.

    Raises:
        AuthenticationError: The provider raised, did not answer within ``connect_timeout``,
            or returned something that is not a non-empty str (the message names the failure,
            never a token).
    """
    provider = options.token_provider
    if provider is None:
        return None
    token: Any = None
    try:
        with anyio.move_on_after(options.connect_timeout) as scope:
            call = type(provider).__call__  # an object with an async __call__ counts too
            if inspect.iscoroutinefunction(provider) or inspect.iscoroutinefunction(call):
                token = provider()
            else:
                token = await anyio.to_thread.run_sync(provider, abandon_on_cancel=True)
            if inspect.isawaitable(token):
                token = await token
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise AuthenticationError(
            f"the token_provider failed: {reason[:200]}", retriable=False
        ) from exc
    if scope.cancelled_caught:
        raise AuthenticationError(
            f"the token_provider returned no token within connect_timeout "
            f"({options.connect_timeout:g} s, jms.connectTimeout): it was abandoned",
            retriable=False,
        )
    if not isinstance(token, str) or not token:
        what = "an empty str" if isinstance(token, str) else type(token).__name__
        raise AuthenticationError(f"the token_provider returned {what}, not a token (a str)")
    return token


def _may_log_in_by_certificate(
    tls: TlsClientOptions | None,
    username: str | None,
    mechanisms: tuple[str, ...] | None,
) -> bool:
    """Whether SASL EXTERNAL may be chosen: TLS presents a client certificate.

    Where nobody can tell (an application's ``ssl_context``): with a username, it is taken not
    to (the credentials are what the application means to log in with) unless
    ``sasl_mechanisms`` names EXTERNAL; without one, it is taken to.
    """
    if tls is None or tls.has_client_certificate is not None:
        return tls is not None and tls.has_client_certificate is True
    return not username or (mechanisms is not None and "EXTERNAL" in mechanisms)


class PhysicalConnection:
    """An open AMQP connection to ``broker``, open until ``close()`` or its end.

    Attributes:
        amqp: The awaitable AMQP connection (see ``haclient.amqp.connection``).
        broker: The broker it is connected to.
        prefixes: The address prefixes to apply (announced by the broker, or its product's).
        product: The broker's ``product`` Open property, if any.
        settle_second: Whether the broker grants receiver settle mode ``second``: False when
            known not to, None until a consumer attach has shown it.
        ack_fallback: How acknowledgements are confirmed where mode ``second`` is not granted
            (``haclient.aio.confirm``): per broker, or as the ``ack_confirmation`` option says.
        ack_fallback_only: True when the ``ack_confirmation`` option names a fallback: mode
            ``second`` is not even asked for.
        advertised_brokers: The ``failover-server-list`` of the broker's Open, as given.
        user_id / populate_user_id: With ``populate_user_id`` (``jms.populateJMSXUserID``),
            every message sent here carries ``user_id`` as its ``user-id`` (JMSXUserID): the
            UTF-8 name of the user that logged in (None: an anonymous login, no user id).
        drain_timeout: How long a consumer waits for this broker's answer to a drain
            (``amqp.drainTimeout``, per broker too); None: no limit.
        allow_non_secure_redirects: Whether a redirect from ``amqps`` to ``amqp`` is followed
            (``amqp.allowNonSecureRedirects``, F18).

    ``configured`` is the (queue, topic) prefix of ``jms.queuePrefix`` / ``jms.topicPrefix``.
    """

    def __init__(
        self,
        amqp: AmqpConnection,
        broker: BrokerURL,
        ack_confirmation: str = "auto",
        configured: tuple[str | None, str | None] = (None, None),
        user_id: bytes | None = None,
        *,
        populate_user_id: bool = False,
        drain_timeout: float | None = 60.0,
        allow_non_secure_redirects: bool = False,
    ) -> None:
        self.amqp = amqp
        self.allow_non_secure_redirects = allow_non_secure_redirects
        self.broker = broker
        remote = amqp.remote_open
        properties: dict[str, Any] = dict(remote.properties) if remote is not None else {}
        self.product: str | None = (
            properties.get("product") if isinstance(properties.get("product"), str) else None
        )
        self.prefixes = _prefixes(properties, self.product, configured)
        self.user_id = user_id
        self.populate_user_id = populate_user_id
        self.drain_timeout = drain_timeout
        self.settle_second: bool | None = False if self.product == "RabbitMQ" else None
        self.ack_fallback = fallback_for(self.product, ack_confirmation)
        self.ack_fallback_only = ack_confirmation not in ("auto", "settle-second")
        self.advertised_brokers: Any = properties.get("failover-server-list")
        self.offered_capabilities: tuple[str, ...] = (
            remote.offered_capabilities if remote is not None else ()
        )

    @property
    def is_open(self) -> bool:
        """True until the connection ended or was closed."""
        return self.amqp.is_open

    async def wait_closed(self) -> HAClientError | None:
        """Wait until the connection has ended; the error that ended it (None: orderly). A
        connection redirect says where it sends the connection (``redirect_to``, F18)."""
        error = await self.amqp.wait_closed()
        if isinstance(error, RedirectError):
            return resolved(error, self.broker, allow_non_secure=self.allow_non_secure_redirects)
        return error

    async def close(self) -> None:
        """Close (Close frames exchanged, or the socket dropped after a timeout). Idempotent."""
        await self.amqp.close(timeout=5.0)


async def open_physical(
    task_group: TaskGroup,
    broker: BrokerURL,
    options: ConnectionOptions,
    container_id: str,
) -> PhysicalConnection:
    """Open a connection to ``broker`` (its task in ``task_group``); return once it is open.

    Raises:
        ConnectionLostError: the broker cannot be reached, or dropped the connection.
        AuthenticationError: the login was refused.
        OpenTimeoutError: the broker did not answer the Open in time (retriable: failover
            tries the next broker).
        ClientIdInUseError, ProtocolError ...: the broker refused the connection.
    """
    token = await fresh_token(options)
    config = engine_config(broker, options, container_id, token=token)
    host, port = broker.address
    mine = options.for_broker(broker)
    try:
        amqp = await connect_amqp(
            host,
            port,
            config,
            task_group,
            connect_timeout=options.connect_timeout,
            tcp_timeout=mine.tcp_connect_timeout,
            socket_options=socket_options(mine),
        )
    except AuthenticationError as exc:  # say whose login which broker refused (no password)
        raise _refused_login(exc, broker, config, token=token is not None) from None
    except RedirectError as exc:  # refused the Open with a redirect: where to go (F18)
        raise resolved(exc, broker, allow_non_secure=mine.allow_non_secure_redirects) from None
    configured = (options.queue_prefix, options.topic_prefix)
    user = config.auth.username if config.auth is not None else None
    return PhysicalConnection(
        amqp,
        broker,
        options.ack_confirmation,
        configured,
        user.encode("utf-8") if user else None,
        populate_user_id=options.populate_user_id,
        drain_timeout=mine.drain_timeout,
        allow_non_secure_redirects=mine.allow_non_secure_redirects,
    )


def _prefixes(
    properties: dict[str, Any], product: str | None, configured: tuple[str | None, str | None]
) -> DestinationPrefixes:
    """The address prefixes for a broker, each kind on its own: the one its Open announces,
    else the configured one (``jms.queuePrefix`` / ``jms.topicPrefix``), else its product's
    (RabbitMQ's ``/queue/`` and ``/topic/`` when it announces neither).

    Qpid JMS keeps the configured prefix until the broker's Open announces one, which then
    replaces it; this does the same, broker by broker.
    """
    silent = DestinationPrefixes.from_open_properties(properties) == NO_PREFIXES
    fallback = _RABBITMQ_PREFIXES if silent and product == "RabbitMQ" else NO_PREFIXES
    queue, topic = configured
    return DestinationPrefixes(
        queue=_announced_or(properties, QUEUE_PREFIX_PROPERTY, queue, fallback.queue),
        topic=_announced_or(properties, TOPIC_PREFIX_PROPERTY, topic, fallback.topic),
    )


def _announced_or(
    properties: dict[str, Any], name: str, configured: str | None, fallback: str
) -> str:
    announced = properties.get(name)
    if isinstance(announced, str):
        return announced
    return configured if configured is not None else fallback


def _refused_login(
    exc: AuthenticationError, broker: BrokerURL, config: EngineConfig, *, token: bool
) -> Exception:
    """``exc`` said again with the broker and the login it refused (never the password or
    token) and what to check, or the broker whose TLS handshake failed and why. A verdict of
    our own (no mechanism in common, a broker that cannot prove SCRAM) is said as a failed
    login, not as the broker's refusal."""
    if exc.condition == TLS_FAILED:
        text = f"TLS with {broker} failed: {exc.description or exc}"
        return AuthenticationError(
            text, condition=exc.condition, description=exc.description, info=exc.info
        )
    auth = config.auth
    user = auth.username if auth is not None else None
    certificate = auth is not None and auth.client_certificate
    if user:
        who = f"the login of user {user!r}"
        check = "the token token_provider returns" if token else "the user name and password"
    elif certificate:
        who, check = "the login by client certificate", "the client certificate"
    else:
        who, check = "an anonymous login", "whether the broker wants a user name and password"
    if exc.condition == SASL_FAILED or (exc.description or "").startswith(NO_MECHANISM):
        text = f"{who[0].upper()}{who[1:]} to {broker} failed: {exc}"
    else:
        text = f"{broker} refused {who}: {exc} (check {check})"
    return AuthenticationError(
        text, condition=exc.condition, description=exc.description, info=exc.info
    )
