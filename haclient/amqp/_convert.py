"""Conversions between our plain values and proton's engine objects (private).

Everything that reads or writes a ``proton.Terminus``, ``proton.Condition`` or a delivery's
disposition lives here, so that the rest of the package speaks only ``haclient.amqp.types``.
"""

from __future__ import annotations

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


def write_terminus(dest: PnTerminus, src: Terminus | None, *, is_source: bool) -> None:
    """Copy our ``Terminus`` into a link's local proton terminus."""
    if src is None or src.kind is TerminusKind.NULL:
        dest.type = PnTerminus.UNSPECIFIED
        return
    if src.kind is TerminusKind.COORDINATOR:
        dest.type = PnTerminus.COORDINATOR
        put_data(dest.capabilities, symbol_array(src.capabilities))
        return
    dest.type = PnTerminus.SOURCE if is_source else PnTerminus.TARGET
    if src.address is not None:
        dest.address = src.address
    dest.durability = int(src.durable)
    dest.expiry_policy = _EXPIRY_TO_PN[src.expiry_policy]
    dest.timeout = src.timeout
    dest.dynamic = src.dynamic
    dest.distribution_mode = _DIST_TO_PN[src.distribution]
    put_data(dest.capabilities, symbol_array(src.capabilities))
    put_data(dest.filter, symbol_keys(src.filter))
    put_data(dest.properties, symbol_keys(src.dynamic_node_properties))
    put_data(dest.outcomes, symbol_array(src.outcomes))


def read_terminus(src: PnTerminus) -> Terminus:
    """Our ``Terminus`` from a proton terminus (local or remote)."""
    if src.type == PnTerminus.UNSPECIFIED:
        return Terminus.null()
    capabilities = symbols(get_data(src.capabilities))
    if src.type == PnTerminus.COORDINATOR:
        return Terminus.coordinator(capabilities)
    filters = get_data(src.filter)
    node_properties = get_data(src.properties)
    return Terminus(
        address=src.address,
        durable=Durability(src.durability),
        expiry_policy=_EXPIRY_FROM_PN.get(src.expiry_policy, ExpiryPolicy.SESSION_END),
        timeout=src.timeout,
        dynamic=src.dynamic,
        capabilities=capabilities,
        filter=plain_keys(filters) if filters else None,
        distribution=_DIST_FROM_PN.get(src.distribution_mode, Distribution.UNSPECIFIED),
        dynamic_node_properties=plain_keys(node_properties) if node_properties else None,
        outcomes=symbols(get_data(src.outcomes)),
    )


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
