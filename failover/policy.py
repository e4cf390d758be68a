"""Failover policies: which broker to try next, and after what delay (SEMANTICS F1, F4, F5).

How this works: a ``FailoverPolicy`` is an immutable value, validated in ``__post_init__``, that
``from_options`` builds from URL options and ``to_options`` prints back. Its only behaviour is
pure: ``attempts(brokers, ...)`` returns an iterator of ``Attempt`` values (which broker, after
what delay) and runs out when the policy is exhausted, i.e. when failover gives up (F4). Nothing
here sleeps, reads a clock or does I/O: the caller sleeps ``attempt.delay`` and connects. Jitter
and ``randomize`` draw from an injected ``random.Random``, so a seeded one makes a plan exact.
The manager walks the same plan as a tenacity wait and stop (``failover.schedule``): ``delay``
is the wait, ``total_attempts`` and ``give_up_after`` the stop.

The plan (F5), for a list of ``n`` brokers:

- A *pass* visits every broker of the list once, in order, making ``retries`` consecutive
  attempts on each (``None``: one). ``cyclecount`` passes are made (``None``, the default:
  passes never run out; the time budget ``give_up_after`` ends the plan, which the manager
  measures on its clock: ``failover.states.budget_delay``).
- ``roundrobin``: the first pass starts at the broker after ``start_index`` (the broker that
  failed) and wraps round, so the failed broker comes last; without ``start_index`` (the first
  connect) it starts at broker 0.
- ``singlebroker``: broker 0 alone. With ``retries`` given, ``retries`` attempts in all (F5;
  ``cyclecount`` does not apply); without it, one attempt per pass, so ``cyclecount`` (or
  Qpid JMS's ``maxReconnectAttempts``) counts attempts and the time budget ends the plan.
- ``exchange``: roundrobin over whatever list the caller passes; the caller passes the newest
  list the brokers advertised (F12) on each failover, so the list is replaced between failovers.
- ``nofailover``: no attempt at all; the loss is reported at once.
- The first connect (``startup``) makes ``startup_cyclecount`` passes: one by default, so a
  dead URL fails fast; ``None`` means "as many as ``cyclecount``" (Qpid JMS's ``-1``).

Delays. The ``k``-th attempt of a plan (``k = 0, 1, ...``) is in pass ``p = k // P``, at
position ``i = k % P``, where a pass makes ``P = len(pass) * retries`` attempts. With ``F``
fast passes (``F = floor(fast_period / fast_delay)``, 0 when ``fast_period`` is 0)::

    k == 0:                 initial_delay               (+ jitter if initial_delay > 0)
    p <= F, a new broker:   0, at once                  (i > 0 and i % retries == 0)
    p <= F, otherwise:      fast_delay                  (+ jitter)
    p > F:                  min(connect_delay * backoff ** (k - (F + 1) * P), max_delay)
                                                        (+ jitter)

where jitter is drawn uniformly from ``[0, jitter]``. So the *fast phase* (passes 0 to ``F``)
tries the whole list, one broker after another, then waits ``fast_delay`` (a retry of the same
broker waits too), for ``fast_period`` of planned waiting; after it each attempt waits, backing
off. The defaults are made for HA pairs: the first attempt goes to the next broker at once (a
live peer takes over immediately), then the list is tried every 25-50 ms for 3 s (a standby
typically takes over meanwhile; the jitter keeps many clients from hitting a new master in
lockstep), then one attempt after 100 ms, 200 ms, ... doubling to 5 s; failover gives up 2
minutes after the loss. A plain ``amqp://`` URL (``singlebroker``) follows the same schedule,
so it rides out a broker restart.

A URL that sets its own delays gets exactly that schedule: when any of ``initialdelay``,
``connectdelay``, ``backoff``, ``maxdelay`` or ``useReconnectBackOff`` (or their Qpid JMS
names) is given, the fast phase and the jitter are off unless the URL sets
``failover.fastperiod`` or ``failover.jitter`` too. An explicit pass count of ``-1``
(``cyclecount`` or Qpid JMS's ``maxReconnectAttempts``) retries forever, as in Qpid JMS, unless
``failover.giveupafter`` is given too.

Option names. Every ``failover.*`` option is declared once, in ``FAILOVER_OPTIONS`` (its URL
name, its Qpid JMS name as an alias, its kind, default and docs row; the keyword is the field
it sets): ``from_options`` reads URL text through it, ``to_options`` prints fields back through
it, ``__post_init__`` checks fields with its kinds, and docs/api.md's failover options table is
generated from it. haclient's names and Qpid JMS's map onto the same fields; the same field
given twice with different values raises ``ConfigurationError``. Durations in options are
milliseconds; fields are seconds. Two names need a word more:

- ``failover.cyclecount`` and Qpid JMS's ``failover.maxReconnectAttempts`` mean the same thing:
  since Qpid JMS 0.27 (QPIDJMS-336) one "reconnect attempt" is one pass over the whole list.
- ``failover.useReconnectBackOff`` (Qpid JMS's) sets no field of its own: ``false`` sets
  ``backoff = 1``; ``true`` keeps the multiplier given, else uses Qpid JMS's default 2.0.

Ready connections (F16, F17), ActiveMQ's names: ``priorityBackup`` (with ``priorityURIs`` and
``priorityBackupInterval``) returns to a preferred broker, ``backup`` keeps a warm spare; the
policy only carries them, ``failover.states`` decides with them and ``failover.standby`` acts.
``amqpOpenServerListAction`` (Qpid JMS's) says what a broker's announced list does to the
walked one (``failover.states.announced_list``).

Defaults differ from Qpid JMS's where the semantics ask for it: Qpid JMS retries forever, but F4
promises that blocked calls eventually raise ``ConnectionFailedError``, hence the time budget
(a pass count is the wrong unit: with a fast retry it runs out in milliseconds); and Qpid JMS
retries forever at startup too, where a dead URL should fail fast.
"""

from __future__ import annotations

import enum
import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, Generic, TypeVar

from failover.errors import ConfigurationError
from failover.options import (
    Choice,
    Flag,
    Member,
    Milliseconds,
    MinusOneIsNone,
    Names,
    Number,
    Option,
    OptionTable,
    Status,
    Text,
    WholeNumber,
    unknown_option_error,
)

__all__ = [
    "DEFAULT_EXCHANGE_ADDRESS",
    "FAILOVER_OPTIONS",
    "Attempt",
    "FailoverMethod",
    "FailoverPolicy",
]

T = TypeVar("T")

DEFAULT_EXCHANGE_ADDRESS: Final = "amq.failover"

# Qpid JMS's default back-off multiplier, used when only ``useReconnectBackOff=true`` is given.
_QPID_DEFAULT_MULTIPLIER: Final = 2.0


class FailoverMethod(enum.Enum):
    """How the broker list is walked on failover (F5)."""

    SINGLEBROKER = "singlebroker"
    ROUNDROBIN = "roundrobin"
    EXCHANGE = "exchange"
    NOFAILOVER = "nofailover"


# --- The options -----------------------------------------------------------------------------

_POLICY: Final = "failover"  # the layer that reads them: this module

#: Every ``failover.*`` option, in the order docs/api.md lists them; each keyword is the field of
#: ``FailoverPolicy`` it sets, each alias Qpid JMS's name for it. ``failover.useReconnectBackOff``
#: has no keyword: it sets ``backoff`` (see the module docstring).
FAILOVER_OPTIONS: Final = OptionTable(
    [
        Option(
            "failover.method",
            Member(FailoverMethod),
            FailoverMethod.ROUNDROBIN,
            "`singlebroker`, `roundrobin`, `exchange`, `nofailover`",
            keyword="method",
            layer=_POLICY,
            shown_default="`roundrobin` (`singlebroker` for a plain URL)",
        ),
        Option(
            "failover.retries",
            WholeNumber(1),
            None,
            "Consecutive attempts per broker in a pass; on `singlebroker`, when given, the "
            "attempts in all",
            keyword="retries",
            layer=_POLICY,
            optional=True,
            shown_default="unset (1)",
        ),
        Option(
            "failover.giveupafter",
            MinusOneIsNone(Milliseconds(positive=True), "never"),
            120.0,
            "Time budget: a failover gives up this long after the loss, the first connect this "
            "long after it began (F4); -1 never",
            keyword="give_up_after",
            layer=_POLICY,
            optional=True,
            shown_default="120000 (2 min)",
        ),
        Option(
            "failover.cyclecount",
            MinusOneIsNone(WholeNumber(0), "unlimited"),
            None,
            "Passes over the list, an extra limit besides the time budget; an explicit -1 "
            "retries forever (no time budget unless `giveupafter` is given), as in Qpid JMS",
            keyword="cyclecount",
            aliases=("failover.maxReconnectAttempts",),
            layer=_POLICY,
            optional=True,
            shown_default="-1 (unlimited)",
        ),
        Option(
            "failover.startup.cyclecount",
            MinusOneIsNone(WholeNumber(0), "as cyclecount"),
            1,
            "Passes for the first connect (a dead URL fails fast); -1: as `cyclecount`",
            keyword="startup_cyclecount",
            aliases=("failover.startupMaxReconnectAttempts",),
            layer=_POLICY,
            optional=True,
        ),
        Option(
            "failover.initialdelay",
            Milliseconds(),
            0.0,
            "Before the first attempt of a plan",
            keyword="initial_delay",
            aliases=("failover.initialReconnectDelay",),
            layer=_POLICY,
        ),
        Option(
            "failover.fastdelay",
            Milliseconds(positive=True),
            0.025,
            "The fast phase: a pass over the whole list (brokers one after another, at once), "
            "then this wait, plus jitter",
            keyword="fast_delay",
            layer=_POLICY,
        ),
        Option(
            "failover.fastperiod",
            Milliseconds(),
            3.0,
            "How much waiting the fast phase lasts (`fastperiod / fastdelay` passes after the "
            "first); 0: no fast phase",
            keyword="fast_period",
            layer=_POLICY,
            shown_default="3000 (0 when the URL sets its own delays)",
        ),
        Option(
            "failover.connectdelay",
            Milliseconds(),
            0.1,
            "After the fast phase: the wait before each attempt starts here and backs off",
            keyword="connect_delay",
            aliases=("failover.reconnectDelay",),
            layer=_POLICY,
        ),
        Option(
            "failover.backoff",
            Number(1.0),
            2.0,
            "Delay multiplier per failed attempt after the fast phase; "
            "`failover.useReconnectBackOff=true` without a multiplier means 2, `false` means 1",
            keyword="backoff",
            aliases=("failover.reconnectBackOffMultiplier",),
            layer=_POLICY,
        ),
        Option(
            "failover.useReconnectBackOff",
            Flag(),
            None,
            "Qpid JMS's switch for the back-off: `false` sets `backoff` to 1, `true` keeps the "
            "multiplier given, else 2",
            layer=_POLICY,
            optional=True,
        ),
        Option(
            "failover.maxdelay",
            Milliseconds(),
            5.0,
            "Cap on the back-off, before jitter",
            keyword="max_delay",
            aliases=("failover.maxReconnectDelay",),
            layer=_POLICY,
        ),
        Option(
            "failover.jitter",
            Milliseconds(),
            0.025,
            "Up to this much random delay added to every wait (never to an attempt that goes "
            "at once)",
            keyword="jitter",
            layer=_POLICY,
            shown_default="25 (0 when the URL sets its own delays)",
        ),
        Option(
            "failover.timeout",
            Milliseconds(positive=True),
            None,
            "How long a call may wait at the gate before `FailoverTimeoutError` (F4); unset: "
            "until failover ends",
            keyword="timeout",
            layer=_POLICY,
            optional=True,
        ),
        Option(
            "failover.exchange.address",
            Text(empty=False),
            DEFAULT_EXCHANGE_ADDRESS,
            "Membership topic of `exchange` (F12)",
            keyword="exchange_address",
            layer=_POLICY,
        ),
        Option(
            "failover.randomize",
            Flag(),
            False,
            "Shuffle the list once per plan (Qpid JMS's name too)",
            keyword="randomize",
            layer=_POLICY,
        ),
        Option(
            "failover.warnAfterReconnectAttempts",
            WholeNumber(),
            10,
            "Log a warning every N failed attempts; <= 0: never (Qpid JMS's name too)",
            keyword="warn_after_attempts",
            layer=_POLICY,
        ),
        Option(
            "failover.amqpOpenServerListAction",
            Choice(("replace", "add", "ignore"), fold=True),
            None,
            "What the broker list a broker's Open announces does to the list failover walks, as "
            "in Qpid JMS: `REPLACE` (the broker connected to, then the announced ones), `ADD` "
            "(the announced ones appended), `IGNORE`; unset: followed only with "
            "`failover.method=exchange` (F12)",
            keyword="open_server_list_action",
            layer=_POLICY,
            optional=True,
            shown_default="unset",
        ),
        Option(
            "failover.priorityBackup",
            Flag(),
            False,
            "Return to a preferred broker (F16): on another broker, probe the preferred ones "
            "every `priorityBackupInterval` and move back, as a planned failover, once one "
            "accepts a connection (ActiveMQ's name too)",
            keyword="priority_backup",
            layer=_POLICY,
        ),
        Option(
            "failover.priorityURIs",
            Names(what="broker URL"),
            None,
            "The preferred brokers of `priorityBackup`, comma-separated, each a broker of the "
            "list (same host and port) (ActiveMQ's name too)",
            keyword="priority_uris",
            layer=_POLICY,
            optional=True,
            shown_default="the first broker of the list",
        ),
        Option(
            "failover.priorityBackupInterval",
            Milliseconds(positive=True),
            5.0,
            "How often `priorityBackup` probes the preferred brokers, plus jitter",
            keyword="priority_backup_interval",
            layer=_POLICY,
        ),
        Option(
            "failover.backup",
            Flag(),
            False,
            "Warm backup (F17): keep one spare connection (TLS, SASL and Open done, no "
            "sessions) to the next broker of the plan; a failover takes it first (ActiveMQ's "
            "name too)",
            keyword="backup",
            layer=_POLICY,
        ),
    ]
)


@dataclass(frozen=True, slots=True)
class Attempt(Generic[T]):
    """One connection attempt of a plan: wait ``delay`` seconds, then connect to ``broker``.

    Attributes:
        broker_index: The index of ``broker`` in the list given to ``FailoverPolicy.attempts``.
        broker: The broker to connect to (an element of that list).
        delay: Seconds to wait before connecting (the caller sleeps; the policy never does).
        number: 1 for the first attempt of the plan, 2 for the next, ...
    """

    broker_index: int
    broker: T
    delay: float
    number: int


@dataclass(frozen=True, slots=True)
class FailoverPolicy:
    """An immutable failover policy; see the module docstring for the plan it describes.

    Attributes:
        method: How the list is walked.
        retries: Consecutive attempts on each broker in a pass (>= 1); None: one
            (``singlebroker``: given, the attempts in all).
        cyclecount: Passes over the list (>= 0); None: unlimited.
        startup_cyclecount: Passes for the first connect; None: the same as ``cyclecount``.
        give_up_after: Seconds after which a failover (from the loss) or the first connect
            (from its start) gives up (> 0); None: never on time. The manager measures it.
        initial_delay: Seconds before the first attempt of a plan (>= 0).
        fast_delay: Seconds between attempts of the fast phase (> 0).
        fast_period: Planned seconds of the fast phase (>= 0; 0: none); it makes
            ``floor(fast_period / fast_delay)`` passes after the first.
        connect_delay: Seconds before the first attempt after the fast phase; the base of the
            back-off (>= 0).
        backoff: Multiplier applied per consecutive failure (>= 1; 1 = constant delay).
        max_delay: Cap on the back-off delay, in seconds (>= 0), before jitter.
        jitter: Up to this many seconds, drawn uniformly, added to every delay (>= 0).
        timeout: Seconds a call may block during failover before ``FailoverTimeoutError``
            (> 0); None: until failover ends (F4).
        exchange_address: The membership address of the ``exchange`` method (F12).
        randomize: Shuffle the list once at the start of each plan.
        warn_after_attempts: Log a warning every this many failed attempts (<= 0: never).
        open_server_list_action: What a broker list announced in a broker's Open does to the
            list the next failover walks: ``"replace"``, ``"add"`` or ``"ignore"``, Qpid JMS's
            meanings; None: followed only with ``exchange`` (F12).
        priority_backup: Return to a preferred broker when one accepts connections (F16).
        priority_uris: The preferred brokers (URLs of brokers of the list, matched by host
            and port); None: the first broker of the list.
        priority_backup_interval: Seconds between two probes of the preferred brokers (> 0).
        backup: Keep a spare connection to the next broker of the plan (F17).
        accepted_options: The options ``from_options`` read that are accepted without effect
            (``Status.ACCEPTED``), for the layer above to warn about.

    Raises:
        ConfigurationError: From the constructor, naming the field, for an invalid value.
    """

    method: FailoverMethod = FailoverMethod.ROUNDROBIN
    retries: int | None = None
    cyclecount: int | None = None
    startup_cyclecount: int | None = 1
    give_up_after: float | None = 120.0
    initial_delay: float = 0.0
    fast_delay: float = 0.025
    fast_period: float = 3.0
    connect_delay: float = 0.1
    backoff: float = 2.0
    max_delay: float = 5.0
    jitter: float = 0.025
    timeout: float | None = None
    exchange_address: str = DEFAULT_EXCHANGE_ADDRESS
    randomize: bool = False
    warn_after_attempts: int = 10
    open_server_list_action: str | None = None
    priority_backup: bool = False
    priority_uris: tuple[str, ...] | None = None
    priority_backup_interval: float = 5.0
    backup: bool = False
    accepted_options: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for option in FAILOVER_OPTIONS:  # each field by the kind of the option that sets it
            if option.keyword is not None:
                option.check(getattr(self, option.keyword))

    # --- Decisions -------------------------------------------------------------------------

    def attempts(
        self,
        brokers: Sequence[T],
        *,
        start_index: int | None = None,
        startup: bool = False,
        rng: random.Random | None = None,
    ) -> Iterator[Attempt[T]]:
        """The plan of one failover (or of the first connect), lazily, never sleeping.

        Args:
            brokers: The broker list to walk. For ``exchange`` pass the newest list learned
                from the brokers (F12); any sequence works, the policy only indexes it.
            start_index: The index of the broker that was lost: ``roundrobin`` and ``exchange``
                start after it. None (the first connect, or an ``exchange`` list that no
                longer holds the lost broker): start at broker 0.
            startup: True for the first connect: ``startup_cyclecount`` applies.
            rng: Draws jitter and the ``randomize`` shuffle; seed it for an exact plan. A new
                unseeded ``random.Random`` when None.

        Returns:
            An iterator of ``Attempt``; when it runs out, failover gives up (F4). Empty for
            ``nofailover``, for ``cyclecount=0`` and for an empty list.

        Raises:
            ConfigurationError: ``start_index`` is not an index of ``brokers``.
        """
        if start_index is not None and not 0 <= start_index < len(brokers):
            raise ConfigurationError(
                f"start_index {start_index} is not an index of a list of {len(brokers)} brokers",
                option="start_index",
            )
        return self._plan(brokers, start_index, startup, rng or random.Random())

    def _plan(
        self,
        brokers: Sequence[T],
        start_index: int | None,
        startup: bool,
        rng: random.Random,
    ) -> Iterator[Attempt[T]]:
        order = self.broker_order(len(brokers), start_index=start_index, rng=rng)
        total = self.total_attempts(len(brokers), startup=startup)
        indices = itertools.islice(self.broker_cycle(order), total)
        for number, index in enumerate(indices):
            delay = self.delay(number, brokers=len(order), rng=rng)
            yield Attempt(index, brokers[index], delay, number + 1)

    def broker_cycle(self, order: Sequence[int]) -> Iterator[int]:
        """The broker of every attempt, pass after pass without end: each index of ``order``
        (one pass, from ``broker_order``) ``retries`` times in a row. Empty for an empty
        ``order``."""
        per_broker = self.retries or 1
        while order:
            for index in order:
                yield from itertools.repeat(index, per_broker)

    def delay(self, attempt: int, *, brokers: int = 1, rng: random.Random | None = None) -> float:
        """The delay before the ``attempt``-th attempt (0-based) of a plan whose passes visit
        ``brokers`` brokers: ``base_delay`` plus the jitter, drawn from ``rng``, that every
        delay gets but an attempt at once (the first, or a new broker in the fast phase)."""
        self._check(attempt, brokers)
        delay, at_once = self._base(attempt, brokers)
        if self.jitter and (delay > 0 or not at_once):
            delay += self.jitter * (rng or random.Random()).random()
        return delay

    def broker_order(
        self, count: int, *, start_index: int | None = None, rng: random.Random | None = None
    ) -> tuple[int, ...]:
        """The broker indices one pass visits, in order (see the module docstring).

        ``randomize`` shuffles the list first (with ``rng``); the lost broker still goes last.
        """
        if self.method is FailoverMethod.NOFAILOVER or count == 0:
            return ()
        if self.method is FailoverMethod.SINGLEBROKER:
            return (0,)
        indices = list(range(count))
        if self.randomize:
            (rng or random.Random()).shuffle(indices)
        if start_index is not None:
            at = indices.index(start_index) + 1
            indices = indices[at:] + indices[:at]
        return tuple(indices)

    @property
    def fast_passes(self) -> int:
        """How many passes after the first the fast phase makes: ``fast_period`` worth of
        ``fast_delay`` (the small tolerance keeps ``3 / 0.025`` at 120)."""
        if self.fast_period == 0.0:
            return 0
        return math.floor(self.fast_period / self.fast_delay + 1e-9)

    def base_delay(self, attempt: int, *, brokers: int = 1) -> float:
        """The delay before the ``attempt``-th attempt (0-based) of a plan whose passes visit
        ``brokers`` brokers, without jitter (see the module docstring)."""
        self._check(attempt, brokers)
        return self._base(attempt, brokers)[0]

    @staticmethod
    def _check(attempt: int, brokers: int) -> None:
        if attempt < 0:
            raise ConfigurationError(f"attempt must be >= 0, not {attempt}", option="attempt")
        if brokers < 1:
            raise ConfigurationError(f"brokers must be >= 1, not {brokers}", option="brokers")

    def _base(self, attempt: int, brokers: int) -> tuple[float, bool]:
        """``base_delay`` (arguments checked), and whether the attempt goes at once: the first,
        or one that moves on to the next broker of a pass of the fast phase (a fast pass tries
        the whole list, one broker after another). One function, so that a plan's step works
        the fast phase out once (bench/README.md, issue 39 item 14)."""
        if attempt == 0:
            return self.initial_delay, True
        retries = self.retries or 1
        per_pass = brokers * retries
        fast = self.fast_passes if self.fast_period > 0.0 else -1
        if attempt // per_pass <= fast:  # the fast phase: passes 0 to fast_passes
            within = attempt % per_pass
            if within > 0 and within % retries == 0:  # the next broker of a fast pass
                return 0.0, True
            return self.fast_delay, False
        if self.backoff == 1.0 or self.connect_delay == 0.0:
            return min(self.connect_delay, self.max_delay), False
        after = attempt - (fast + 1) * per_pass if self.fast_period > 0.0 else attempt - 1
        try:
            grown = self.connect_delay * self.backoff**after
        except OverflowError:  # far past the cap
            return self.max_delay, False
        return min(grown, self.max_delay), False

    def _passes(self, startup: bool) -> int | None:
        """Passes over the list: one for singlebroker with ``retries`` (F5: ``retries``
        attempts in all)."""
        if self.method is FailoverMethod.SINGLEBROKER and self.retries is not None:
            return 1
        if startup and self.startup_cyclecount is not None:
            return self.startup_cyclecount
        return self.cyclecount

    def total_attempts(self, broker_count: int, *, startup: bool = False) -> int | None:
        """How many attempts a plan over ``broker_count`` brokers makes (None: unlimited)."""
        passes = self._passes(startup)
        per_pass = len(self.broker_order(broker_count)) * (self.retries or 1)
        if per_pass == 0 or passes == 0:
            return 0
        return None if passes is None else per_pass * passes

    # --- Options ----------------------------------------------------------------------------

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, str],
        *,
        default_method: FailoverMethod = FailoverMethod.ROUNDROBIN,
    ) -> FailoverPolicy:
        """Build a policy from ``failover.*`` URL options (haclient's or Qpid JMS's names).

        Args:
            options: Option name to raw (already percent-decoded) value.
            default_method: The method when ``failover.method`` is absent.

        Raises:
            ConfigurationError: Naming the option: an unknown option, a malformed or
                out-of-range value, or two options that set one field to different values.
        """
        values: dict[str, Any] = {"method": default_method}
        source: dict[str, str] = {}
        use_backoff: bool | None = None
        for name, raw in options.items():
            option = FAILOVER_OPTIONS.named(name)
            if option is None:
                raise unknown_option_error(name, FAILOVER_OPTIONS.url_names)
            value = option.parse(raw, as_named=name)
            if option.status is Status.ACCEPTED:
                values["accepted_options"] = (*values.get("accepted_options", ()), name)
                continue
            if option.keyword is None:  # failover.useReconnectBackOff: sets backoff, below
                use_backoff = value
                continue
            field_name = option.keyword
            if field_name in source and values[field_name] != value:
                raise ConfigurationError(
                    f"{source[field_name]} and {name} set {field_name} to different values",
                    option=name,
                )
            values[field_name] = value
            source[field_name] = name
        if use_backoff is False:
            if values.get("backoff", 1.0) != 1.0:
                raise ConfigurationError(
                    f"failover.useReconnectBackOff=false contradicts {source['backoff']}",
                    option="failover.useReconnectBackOff",
                )
            values["backoff"] = 1.0
        elif use_backoff is True and "backoff" not in values:
            values["backoff"] = _QPID_DEFAULT_MULTIPLIER
        _own_schedule(values, use_backoff is not None)
        try:
            return cls(**values)
        except ConfigurationError as exc:  # name the option, not the field
            named = source.get(exc.option or "", exc.option)
            raise ConfigurationError(f"{named}: {exc}", option=named) from None

    def to_options(self) -> dict[str, str]:
        """The canonical ``failover.*`` options (haclient's names) that ``from_options`` reads
        back into an equal policy. ``failover.method`` is always given; other fields only when
        they differ from the defaults."""
        differ = [f for f in _FIELDS if getattr(self, f) != getattr(_DEFAULT, f)]
        out = dict(self._option(f) for f in ("method", *differ))
        # What from_options would otherwise switch off, printed so that it reads back equal.
        if any(self._option(name)[0] in out for name in _OWN_DELAYS):
            for name in _OWN_DELAYS_OFF:
                out.setdefault(*self._option(name))
        return out

    def _option(self, field_name: str) -> tuple[str, str]:
        """The URL option (canonical name, text) that sets ``field_name`` to its value here."""
        option = FAILOVER_OPTIONS.keyword(field_name)
        assert option is not None and option.name is not None  # every field has one
        return option.name, option.kind.format(getattr(self, field_name))


# Fields whose option marks a URL that sets its own delays (Qpid JMS style), and the fields of
# haclient's default schedule that such a URL does not get unless it asks for them.
_OWN_DELAYS: Final = ("initial_delay", "connect_delay", "backoff", "max_delay")
_OWN_DELAYS_OFF: Final = ("fast_period", "jitter")


def _own_schedule(values: dict[str, Any], use_backoff_given: bool) -> None:
    """Apply the rules of a URL that sets its own schedule (see the module docstring): its
    delays alone, without the fast phase and the jitter; an explicit ``-1`` pass count
    retries forever, as in Qpid JMS."""
    if use_backoff_given or any(name in values for name in _OWN_DELAYS):
        for name in _OWN_DELAYS_OFF:
            values.setdefault(name, 0.0)
    if "cyclecount" in values and values["cyclecount"] is None:
        values.setdefault("give_up_after", None)


# The fields to_options prints when they differ from the defaults (the method it always
# prints), in the order of the class, which is the order of the printed URL's options.
_FIELDS: Final = tuple(
    f.name for f in fields(FailoverPolicy) if f.name not in ("method", "accepted_options")
)

_DEFAULT: Final = FailoverPolicy()
