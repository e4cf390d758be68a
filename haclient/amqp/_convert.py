"""Conversions between our plain values and proton's engine objects (private).

Everything that reads or writes a ``proton.Terminus``, ``proton.Condition`` or a delivery's
disposition lives here, so that the rest of the package speaks only ``haclient.amqp.types``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import cproton
import proton
from proton import UNDESCRIBED, Array, Condition, Data, Described, Disposition, symbol, ulong
from proton import Terminus as PnTerminus

from haclient.amqp.types import (
    Accepted,
    Declared,
    Distribution,
    Durability,
    ErrorCondition,
    ExpiryPolicy,
    Modified,
    Outcome,
    Received,
    Rejected,
    Released,
    Terminus,
    TerminusKind,
    TransactionalState,
)

# Delivery-state descriptors from the AMQP 1.0 specification (section 3.4 and 4.5).
NO_STATE_CODE = 0  # proton's code for a delivery with no state (settled without an outcome)
RECEIVED_CODE = 0x23
ACCEPTED_CODE = 0x24
_ACCEPTED: Final = Accepted()
REJECTED_CODE = 0x25
RELEASED_CODE = 0x26
MODIFIED_CODE = 0x27
DECLARED_CODE = 0x33
TRANSACTIONAL_STATE_CODE = 0x34

# AMQP 1.0 names every described type twice, by a number and by a symbol, and a peer may send
# either (python-qpid-proton's own Container declares with ``amqp:declare:list``). The symbolic
# descriptors of the types haclient reads itself, with the numeric code each stands for.
SYMBOLIC_DESCRIPTORS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "amqp:error:list": 0x1D,
        "amqp:received:list": RECEIVED_CODE,
        "amqp:accepted:list": ACCEPTED_CODE,
        "amqp:rejected:list": REJECTED_CODE,
        "amqp:released:list": RELEASED_CODE,
        "amqp:modified:list": MODIFIED_CODE,
        "amqp:declare:list": 0x31,
        "amqp:discharge:list": 0x32,
        "amqp:declared:list": DECLARED_CODE,
        "amqp:transactional-state:list": TRANSACTIONAL_STATE_CODE,
        "amqp:header:list": 0x70,
        "amqp:delivery-annotations:map": 0x71,
        "amqp:message-annotations:map": 0x72,
        "amqp:properties:list": 0x73,
        "amqp:application-properties:map": 0x74,
        "amqp:data:binary": 0x75,
        "amqp:amqp-sequence:list": 0x76,
        "amqp:amqp-value:*": 0x77,
        "amqp:footer:map": 0x78,
    }
)


def descriptor_code(descriptor: Any) -> int | None:
    """The numeric code of a descriptor in either form (None: neither a number nor a known
    symbol)."""
    if isinstance(descriptor, int) and not isinstance(descriptor, bool):
        return int(descriptor)
    if isinstance(descriptor, str):
        return SYMBOLIC_DESCRIPTORS.get(descriptor)
    return None


_EXPIRY_TO_PN = {
    ExpiryPolicy.LINK_DETACH: PnTerminus.EXPIRE_WITH_LINK,
    ExpiryPolicy.SESSION_END: PnTerminus.EXPIRE_WITH_SESSION,
    ExpiryPolicy.CONNECTION_CLOSE: PnTerminus.EXPIRE_WITH_CONNECTION,
    ExpiryPolicy.NEVER: PnTerminus.EXPIRE_NEVER,
}
_EXPIRY_FROM_PN = {v: k for k, v in _EXPIRY_TO_PN.items()}
_DIST_TO_PN = {
    Distribution.UNSPECIFIED: PnTerminus.DIST_MODE_UNSPECIFIED,
    Distribution.MOVE: PnTerminus.DIST_MODE_MOVE,
    Distribution.COPY: PnTerminus.DIST_MODE_COPY,
}
_DIST_FROM_PN = {v: k for k, v in _DIST_TO_PN.items()}


# Data helpers ----------------------------------------------------------------------------------


def put_data(data: Data, value: Any) -> None:
    """Replace the contents of a proton ``Data`` with one value (nothing for None)."""
    data.clear()
    if value is not None:
        data.put_object(value)


def get_data(data: Data) -> Any:
    """The first value in a proton ``Data``, or None when it is empty."""
    data.rewind()
    if data.next() is None:
        return None
    return owned(data.get_object())


def symbols(value: Any) -> tuple[str, ...]:
    """A ``multiple`` symbol field (one symbol, an array, a list or nothing) as a tuple of str."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (str(value),)
    if isinstance(value, Array):
        return tuple(str(v) for v in value.elements)
    return tuple(str(v) for v in value)


def symbol_array(values: tuple[str, ...]) -> Array | None:
    """A tuple of names as an AMQP array of symbols (None when empty)."""
    if not values:
        return None
    return Array(UNDESCRIBED, Data.SYMBOL, *(symbol(v) for v in values))


def symbol_keys(mapping: Mapping[str, Any] | None) -> dict[symbol, Any] | None:
    """A map whose keys must be symbols on the wire (annotations, filters, properties)."""
    if mapping is None:
        return None
    return {symbol(k): v for k, v in mapping.items()}


def plain_keys(mapping: Any) -> dict[str, Any]:
    """A symbol-keyed map from the wire as a dict with ``str`` keys."""
    if not mapping:
        return {}
    return {str(k): v for k, v in mapping.items()}


def owned(value: Any) -> Any:
    """``value`` with every binary copied into ``bytes`` of its own.

    proton's decoder hands out binaries nested in lists, maps and described values as
    ``memoryview`` objects over the decoder's buffer, which is freed with the ``Message`` or
    ``Data`` that decoded them: keeping one means reading freed memory later. Every decoded
    value must pass through here while its decoder is alive.
    """
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, str | int | float | bool | bytes) or value is None:
        return value  # the common case first: scalars need no copy
    if isinstance(value, dict):
        return type(value)((owned(k), owned(v)) for k, v in value.items())
    if isinstance(value, list):
        return [owned(v) for v in value]
    if isinstance(value, Described):
        return Described(owned(value.descriptor), owned(value.value))
    if isinstance(value, Array):
        return Array(value.descriptor, value.type, *(owned(v) for v in value.elements))
    return value


# Conditions ------------------------------------------------------------------------------------


def condition_from_pn(cond: Condition | None) -> ErrorCondition | None:
    """Our ``ErrorCondition`` from proton's, or None."""
    if cond is None or not cond.name:
        return None
    info = plain_keys(owned(cond.info)) if cond.info else None
    return ErrorCondition(str(cond.name), cond.description or None, info)


def condition_to_pn(error: ErrorCondition | None) -> Condition | None:
    """Proton's ``Condition`` from ours, or None."""
    if error is None:
        return None
    return Condition(error.name, error.description, symbol_keys(error.info))


# Termini ---------------------------------------------------------------------------------------
#
# Every attach writes two termini and reads the peer's, thousands of them when failover restores
# a connection's consumers: the code below talks to proton's C termini (``pn_terminus_t``, what
# ``cproton.pn_link_source`` and friends return) directly, without proton's Python wrappers. The
# symbol arrays (capabilities, outcomes) repeat from link to link: each is encoded or decoded once
# and copied as bytes after that.

_PN_UNSPECIFIED: Final = PnTerminus.UNSPECIFIED
_PN_COORDINATOR: Final = PnTerminus.COORDINATOR
_DURABILITY_FROM_PN: Final = {int(d.value): d for d in Durability}


def write_terminus(dest: Any, src: Terminus | None, *, is_source: bool) -> None:
    """Copy our ``Terminus`` into a link's local terminus (proton's C ``pn_terminus_t``)."""
    if src is None or src.kind is TerminusKind.NULL:
        cproton.pn_terminus_set_type(dest, _PN_UNSPECIFIED)
        return
    if src.kind is TerminusKind.COORDINATOR:
        cproton.pn_terminus_set_type(dest, _PN_COORDINATOR)
        _put_symbols(cproton.pn_terminus_capabilities(dest), src.capabilities)
        return
    cproton.pn_terminus_set_type(dest, PnTerminus.SOURCE if is_source else PnTerminus.TARGET)
    if src.address is not None:
        cproton.pn_terminus_set_address(dest, src.address)
    cproton.pn_terminus_set_durability(dest, int(src.durable))
    cproton.pn_terminus_set_expiry_policy(dest, _EXPIRY_TO_PN[src.expiry_policy])
    cproton.pn_terminus_set_timeout(dest, src.timeout)
    cproton.pn_terminus_set_dynamic(dest, src.dynamic)
    cproton.pn_terminus_set_distribution_mode(dest, _DIST_TO_PN[src.distribution])
    _put_symbols(cproton.pn_terminus_capabilities(dest), src.capabilities)
    _put_map(cproton.pn_terminus_filter(dest), src.filter)
    _put_map(cproton.pn_terminus_properties(dest), src.dynamic_node_properties)
    _put_symbols(cproton.pn_terminus_outcomes(dest), src.outcomes)


def read_terminus(src: Any) -> Terminus:
    """Our ``Terminus`` from a link's terminus, local or remote (proton's C ``pn_terminus_t``)."""
    kind = cproton.pn_terminus_get_type(src)
    if kind == _PN_UNSPECIFIED:
        return Terminus.null()
    capabilities = _get_symbols(cproton.pn_terminus_capabilities(src))
    if kind == _PN_COORDINATOR:
        return Terminus.coordinator(capabilities)
    return Terminus(
        address=cproton.pn_terminus_get_address(src),
        durable=_DURABILITY_FROM_PN[cproton.pn_terminus_get_durability(src)],
        expiry_policy=_EXPIRY_FROM_PN.get(
            cproton.pn_terminus_get_expiry_policy(src), ExpiryPolicy.SESSION_END
        ),
        timeout=cproton.pn_terminus_get_timeout(src),
        dynamic=bool(cproton.pn_terminus_is_dynamic(src)),
        capabilities=capabilities,
        filter=_get_map(cproton.pn_terminus_filter(src)),
        distribution=_DIST_FROM_PN.get(
            cproton.pn_terminus_get_distribution_mode(src), Distribution.UNSPECIFIED
        ),
        dynamic_node_properties=_get_map(cproton.pn_terminus_properties(src)),
        outcomes=_get_symbols(cproton.pn_terminus_outcomes(src)),
    )


def is_null_terminus(terminus: Any) -> bool:
    """Whether a terminus (proton's C ``pn_terminus_t``) is null: no source or target."""
    return bool(cproton.pn_terminus_get_type(terminus) == _PN_UNSPECIFIED)


def _put_symbols(data: Any, values: tuple[str, ...]) -> None:
    """Replace the contents of a C ``pn_data_t`` with ``values`` as an array of symbols."""
    cproton.pn_data_clear(data)
    if values:
        cproton.pn_data_decode(data, _encoded_symbols(values))


def _put_map(data: Any, mapping: Mapping[str, Any] | None) -> None:
    """Replace the contents of a C ``pn_data_t`` with a map keyed by symbols (nothing: None)."""
    cproton.pn_data_clear(data)
    if mapping is not None:
        Data(data).put_object(symbol_keys(mapping))


def _get_symbols(data: Any) -> tuple[str, ...]:
    """A ``multiple`` symbol field held in a C ``pn_data_t``, as a tuple of str."""
    size = cproton.pn_data_encoded_size(data)
    if size <= 0:
        return ()
    error, encoded = cproton.pn_data_encode(data, size)
    if error < 0:  # not expected: the size was proton's own
        return symbols(get_data(Data(data)))
    return _decoded_symbols(bytes(encoded))


def _get_map(data: Any) -> dict[str, Any] | None:
    """A map held in a C ``pn_data_t`` with its keys as str (None: empty)."""
    if cproton.pn_data_encoded_size(data) <= 0:
        return None
    value = get_data(Data(data))
    return plain_keys(value) if value else None


@functools.lru_cache(maxsize=256)
def _encoded_symbols(values: tuple[str, ...]) -> bytes:
    data = Data()
    data.put_object(symbol_array(values))
    return bytes(data.encode())


@functools.lru_cache(maxsize=256)
def _decoded_symbols(encoded: bytes) -> tuple[str, ...]:
    data = Data()
    data.decode(encoded)
    return symbols(get_data(data))


# Delivery states -------------------------------------------------------------------------------


def _outcome_value(outcome: Outcome | None) -> Described | None:
    """An outcome as the described value it is inside a transactional state."""
    match outcome:
        case None:
            return None
        case Accepted():
            return Described(ulong(ACCEPTED_CODE), [])
        case Released():
            return Described(ulong(RELEASED_CODE), [])
        case Rejected(error=error):
            cond = None
            if error is not None:
                cond = Described(
                    ulong(0x1D), [symbol(error.name), error.description, symbol_keys(error.info)]
                )
            return Described(ulong(REJECTED_CODE), [cond])
        case Modified(delivery_failed=failed, undeliverable_here=here, annotations=ann):
            return Described(ulong(MODIFIED_CODE), [failed, here, symbol_keys(ann)])
    raise ValueError(f"{outcome!r} cannot be the outcome of a transactional state")


def _outcome_from_value(value: Any) -> Outcome | None:
    """An outcome from its described value (inside a transactional state)."""
    if not isinstance(value, Described):
        return None
    fields = list(value.value or [])
    code = descriptor_code(value.descriptor)
    if code == ACCEPTED_CODE:
        return Accepted()
    if code == RELEASED_CODE:
        return Released()
    if code == REJECTED_CODE:
        error = None
        if fields and isinstance(fields[0], Described):
            name, description, info = ([*list(fields[0].value), None, None, None])[:3]
            error = ErrorCondition(str(name), description, plain_keys(info) if info else None)
        return Rejected(error)
    if code == MODIFIED_CODE:
        failed, here, ann = ([*fields, None, None, None])[:3]
        return Modified(bool(failed), bool(here), plain_keys(ann) if ann else None)
    return None


def write_state(local: Disposition, outcome: Outcome) -> int:
    """Fill a delivery's local disposition with ``outcome``; returns the type to ``update`` with."""
    match outcome:
        case Accepted():
            return ACCEPTED_CODE
        case Released():
            return RELEASED_CODE
        case Rejected(error=error):
            local.condition = condition_to_pn(error)
            return REJECTED_CODE
        case Modified(delivery_failed=failed, undeliverable_here=here, annotations=ann):
            local.failed = failed
            local.undeliverable = here
            if ann:
                local.annotations = symbol_keys(ann)
            return MODIFIED_CODE
        case Received(section_number=number, section_offset=offset):
            local.section_number = number
            local.section_offset = offset
            return RECEIVED_CODE
        case Declared(txn_id=txn_id):
            local.data = [txn_id]
            return DECLARED_CODE
        case TransactionalState(txn_id=txn_id, outcome=inner):
            local.data = [txn_id, _outcome_value(inner)]
            return TRANSACTIONAL_STATE_CODE
    raise TypeError(f"not a delivery state: {outcome!r}")


def update_delivery(impl: Any, outcome: Outcome, wrapped: Callable[[], proton.Delivery]) -> None:
    """Set the local state of the delivery ``impl`` (proton's C object) to ``outcome`` (the
    disposition to send); ``wrapped()`` gives proton's Python wrapper, built only when needed."""
    if isinstance(outcome, Accepted):  # the common case: no proton wrapper built
        cproton.pn_delivery_update(impl, ACCEPTED_CODE)
    else:
        delivery = wrapped()
        delivery.update(write_state(delivery.local, outcome))


def read_state(impl: Any, wrapped: Callable[[], proton.Delivery]) -> Outcome | None:
    """The peer's latest delivery state for the delivery ``impl``, as our value (``wrapped``: as
    for ``update_delivery``)."""
    code = cproton.pn_delivery_remote_state(impl)
    if code == ACCEPTED_CODE:  # the common case: no proton wrapper built
        return _ACCEPTED
    if code == NO_STATE_CODE:  # settled with no state (a broker confirming mode ``second``)
        return None
    if code == RELEASED_CODE:
        return Released()
    remote = wrapped().remote
    if code == REJECTED_CODE:
        return Rejected(condition_from_pn(remote.condition))
    if code == MODIFIED_CODE:
        ann = owned(remote.annotations)
        return Modified(remote.failed, remote.undeliverable, plain_keys(ann) if ann else None)
    if code == RECEIVED_CODE:
        return Received(remote.section_number, remote.section_offset)
    data: list[Any] = owned(list(remote.data or []))
    if code == DECLARED_CODE and data:
        return Declared(bytes(data[0]))
    if code == TRANSACTIONAL_STATE_CODE and data:
        inner = _outcome_from_value(data[1]) if len(data) > 1 else None
        assert inner is None or isinstance(inner, Accepted | Released | Modified | Rejected)
        return TransactionalState(bytes(data[0]), inner)
    return None
