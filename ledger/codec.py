"""The strict, lossless msgspec mapper for ledger events (DESIGN §6).

:class:`LedgerMapper` is an ``eventsourcing`` :class:`~eventsourcing.persistence.Mapper`. Select it
with ``MAPPER_TOPIC=ledger.codec:LedgerMapper`` or return it from ``Application.construct_mapper``.
It stores *ledger events* as msgspec JSON and hands every other event class to the library's
``Mapper`` with the application's own transcoder, so the host's events keep their codec.

A class is a ledger event when it subclasses :class:`LedgerEvent` (the opt-in marker) or
``ledger.operation.Operation.Event``; a mapper subclass may widen that by overriding
:meth:`LedgerMapper.handles`. Records written by the library's default mapper for a class that is
now a ledger event do not load (they hold ``{"_type_": ...}`` transcodings): migrate them first.
For each such class a ``msgspec.Struct`` is built once from
its dataclass fields and type hints: every field required, unknown fields forbidden, datetimes
timezone-aware at any depth. ``originator_id`` and ``originator_version`` live in the record's
columns, not in its state, as in the library.

Stored state round-trips exactly: ``UUID`` as its canonical string, aware ``datetime`` as RFC 3339
with its UTC offset (a ``zoneinfo`` name is not kept, only the offset), ``Decimal`` as a string
(``Decimal('0.1000')`` keeps its exponent), ``bytes`` as base64. Writing checks the same rules by
decoding what it is about to store, so the ledger never writes a record it would refuse to read.

msgspec also reads a JSON number where a ``Decimal`` is declared, as the exact decimal written
(on the upcast path it passes through a float first); this mapper never writes one.

Reading fails closed with :class:`~ledger.errors.CorruptRecordError` naming the operation id and
position: malformed JSON, invalid UTF-8, a lone surrogate, a NUL character in any text (keys and
values at any depth), wrong types, unknown or missing fields, naive datetimes, an undecryptable
or undecompressible record. A record this code is too old for, rather than a damaged one, raises
the subclass :class:`~ledger.errors.UnreadableEventError`: a ``ledger.`` topic that does not
resolve (an event type added later, or a rename not registered with
``eventsourcing.utils.register_topic``) or a ``class_version`` newer than the class's. Other
unresolvable topics keep the library's ``TopicError``: nothing says such a record was a ledger
event.

Upcasting follows the library: a class with ``class_version = N > 1`` stores ``class_version`` in
its state, and an older record is decoded to plain data, passed through the class's static
``upcast_vK_vK+1(state)`` methods in order, then converted strictly to the current Struct.

Source: DESIGN §6 (co-commit and identity, codec); eventsourcing 9.5 ``persistence.Mapper``.
"""

from __future__ import annotations

import dataclasses
import threading
import types
import typing
from datetime import datetime
from typing import Annotated, Any, Literal, Union
from uuid import UUID

import msgspec
from eventsourcing.domain import DomainEventProtocol, TAggregateID
from eventsourcing.persistence import Cipher, Compressor, Mapper, StoredEvent, Transcoder, find_id_convertor
from eventsourcing.utils import TopicError, get_topic, resolve_topic

from ledger.errors import CorruptRecordError, UnreadableEventError

__all__ = [
    "CODEC_VERSION",
    "LEDGER_TOPIC_PREFIX",
    "LedgerEvent",
    "LedgerMapper",
    "event_struct",
    "is_ledger_event_class",
]

CODEC_VERSION = 1
"""The ledger codec's storage format (JSON by msgspec, strict; class versions upcast per class).

Recorded in the store's identity by ``opledger migrate`` and compared on every open
(``ledger.store_identity``): code whose codec differs refuses the store instead of writing
records the other cannot read. Raise it only for a change no upcaster can bridge.
Source: DESIGN §6, §8; issue 16 item 2."""

LEDGER_TOPIC_PREFIX = "ledger."
"""An unresolvable stored topic with this prefix is a corrupt ledger record, not a host event."""

AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]

# Not part of a stored state: the library keeps them in the record's columns.
_COLUMN_FIELDS = frozenset({"originator_id", "originator_version"})
_CLASS_VERSION = "class_version"
# JSON cannot hold a raw NUL in a string (msgspec rejects it), only this escape; a record without
# these bytes cannot contain a NUL, so the walk over every string runs only when they appear.
_NUL_ESCAPE = b"\\u0000"

_ENCODER = msgspec.json.Encoder()  # No enc_hook: an unsupported type is refused, never guessed.
_PLAIN_DECODER = msgspec.json.Decoder()


class _NewerClassVersion(ValueError):
    """A record's ``class_version`` is newer than the class's: written by newer code."""


class LedgerEvent:
    """Marker mixin: events of a class that inherits it are stored by :class:`LedgerMapper`.

    Example: ``class Charged(LedgerEvent, Aggregate.Event)``. Fields
    need type hints msgspec can decode strictly (str, int, float, bool, None, UUID, datetime,
    Decimal, bytes, enums, ``list``/``dict``/``set``/``tuple`` of those, ``Any`` for plain JSON).
    ``Operation.Event`` is recognised without the marker.
    """

    __slots__ = ()


def is_ledger_event_class(cls: type) -> bool:
    """Return whether events of ``cls`` are stored by the ledger codec.

    Args:
        cls: a domain event class.

    Returns:
        True for subclasses of :class:`LedgerEvent` or ``Operation.Event``.

    Source: DESIGN §6 ("the host's own events keep their codec").
    """
    # Imported here so ``ledger.operation`` may itself import this module for the marker.
    from ledger.operation import Operation

    return issubclass(cls, (LedgerEvent, Operation.Event))


def _strict_type(tp: Any) -> Any:
    """Return ``tp`` with every ``datetime`` inside it required to be timezone-aware."""
    if tp is datetime:
        return AwareDatetime
    origin = typing.get_origin(tp)
    if origin is None or origin is Literal:
        return tp
    args = typing.get_args(tp)
    if origin is Annotated:
        return Annotated[(_strict_type(args[0]), *tp.__metadata__)]
    new_args = tuple(a if a is Ellipsis else _strict_type(a) for a in args)
    if new_args == args:
        return tp
    if origin is Union or origin is types.UnionType:
        return Union[new_args]  # noqa: UP007 - built from a tuple of arguments
    if isinstance(tp, types.GenericAlias):
        return types.GenericAlias(origin, new_args)
    return tp.copy_with(new_args)


def _find_nul(value: Any, path: str) -> str | None:
    """Return the path of the first text holding a NUL character, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return f"{path} (a key)"
            found = _find_nul(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, (list, tuple, set, frozenset)):
        for index, item in enumerate(value):
            found = _find_nul(item, f"{path}[{index}]")
            if found:
                return found
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class _EventCodec:
    """Everything the mapper needs for one ledger event class, computed once."""

    cls: type
    topic: str
    struct: type[msgspec.Struct]
    decoder: msgspec.json.Decoder
    names: tuple[str, ...]  # the event's state fields, without class_version
    class_version: int

    def encode(self, state: dict[str, Any]) -> bytes:
        if self.class_version > 1:
            state[_CLASS_VERSION] = self.class_version
        try:
            data = _ENCODER.encode(state)
            # Decoding what is about to be stored applies the read rules at write time.
            decoded = self.decoder.decode(data)
        except (TypeError, msgspec.MsgspecError, UnicodeError) as exc:
            raise ValueError(str(exc)) from exc
        values = msgspec.structs.astuple(decoded)
        if values[: len(self.names)] != tuple(map(state.__getitem__, self.names)):
            field = next(n for n, v in zip(self.names, values) if v != state[n])
            raise ValueError(
                f"field {field!r} does not survive storage: {state[field]!r} would load as {getattr(decoded, field)!r}"
            )
        if _NUL_ESCAPE in data:
            self._refuse_nul(decoded)
        return data

    def decode(self, data: bytes, originator_id: Any, originator_version: int) -> Any:
        """The event stored as ``data`` (plain bytes: decrypted and decompressed), built without
        its ``__init__``, as the library's mapper does."""
        try:
            decoded = self.decoder.decode(data)
        except msgspec.MsgspecError:
            if self.class_version == 1:
                self._refuse_newer(data)
                raise
            # An older class version (or a corrupt record: the strict path reports it).
            decoded = self._decode_and_upcast(data)
        if _NUL_ESCAPE in data:
            self._refuse_nul(decoded)
        fields = msgspec.structs.asdict(decoded)
        if self.class_version > 1:
            del fields[_CLASS_VERSION]
        fields["originator_id"] = originator_id
        fields["originator_version"] = originator_version
        event: Any = object.__new__(self.cls)
        object.__setattr__(event, "__dict__", fields)
        return event

    def _decode_and_upcast(self, data: bytes) -> msgspec.Struct:
        state = _PLAIN_DECODER.decode(data)
        if not isinstance(state, dict):
            raise ValueError(f"expected a JSON object, got {type(state).__name__}")
        version = state.pop(_CLASS_VERSION, 1)
        if type(version) is int and version > self.class_version:
            raise _NewerClassVersion(f"class_version {version} is newer than this code's {self.class_version}")
        if type(version) is not int or not 1 <= version:
            raise ValueError(
                f"class_version {version!r} is not one this code reads (1..{self.class_version})"
            )
        while version < self.class_version:
            upcast = getattr(self.cls, f"upcast_v{version}_v{version + 1}", None)
            if upcast is None:
                raise ValueError(f"{self.cls.__qualname__} has no upcast_v{version}_v{version + 1}")
            upcast(state)
            version += 1
        state[_CLASS_VERSION] = self.class_version
        return msgspec.convert(state, self.struct)

    def _refuse_newer(self, data: bytes) -> None:
        # Only on the failure path: a record of a class that had no version here, written by
        # code whose class carries one, is unreadable rather than corrupt.
        try:
            state = _PLAIN_DECODER.decode(data)
        except msgspec.MsgspecError:
            return
        version = state.get(_CLASS_VERSION) if isinstance(state, dict) else None
        if type(version) is int and version > self.class_version:
            raise _NewerClassVersion(f"class_version {version} is newer than this code's {self.class_version}")

    def _refuse_nul(self, decoded: msgspec.Struct) -> None:
        for name in self.names:
            found = _find_nul(getattr(decoded, name), f"$.{name}")
            if found:
                raise ValueError(f"text at {found} contains a NUL character")


_codecs: dict[type, _EventCodec] = {}
_codecs_lock = threading.Lock()


def _codec_for(cls: type) -> _EventCodec:
    try:
        return _codecs[cls]
    except KeyError:
        pass
    struct = event_struct(cls)
    class_version = getattr(cls, "class_version", 1)
    names = tuple(n for n in struct.__struct_fields__ if n != _CLASS_VERSION)
    codec = _EventCodec(cls, get_topic(cls), struct, msgspec.json.Decoder(struct), names, class_version)
    with _codecs_lock:
        return _codecs.setdefault(cls, codec)


def event_struct(cls: type) -> type[msgspec.Struct]:
    """Return the strict ``msgspec.Struct`` type a ledger event class is stored as.

    Args:
        cls: a dataclass event class whose annotations resolve at module level (``from
            __future__ import annotations`` is fine; a class local to a function is not).

    Returns:
        A Struct type with one required field per dataclass field except ``originator_id`` and
        ``originator_version``, every datetime timezone-aware, unknown fields forbidden, and a
        trailing ``class_version: Literal[N]`` when the class's ``class_version`` N is above 1.
        Cached per class.

    Raises:
        TypeError: ``cls`` is not a dataclass, or a hint does not resolve.
    """
    cached = _codecs.get(cls)
    if cached is not None:
        return cached.struct
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__qualname__} is not a dataclass event class")
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except NameError as exc:
        raise TypeError(f"type hints of {cls.__qualname__} do not resolve: {exc}") from exc
    fields: list[tuple[str, Any]] = [
        (f.name, _strict_type(hints[f.name]))
        for f in dataclasses.fields(cls)
        if f.name not in _COLUMN_FIELDS
    ]
    class_version = getattr(cls, "class_version", 1)
    if class_version > 1:
        fields.append((_CLASS_VERSION, Literal[class_version]))
    return msgspec.defstruct(
        cls.__qualname__, fields, module=cls.__module__, forbid_unknown_fields=True
    )


class LedgerMapper(Mapper[TAggregateID]):
    """Stores ledger events as strict msgspec JSON; every other event as the library does.

    Constructed like the library's ``Mapper``, so ``MAPPER_TOPIC=ledger.codec:LedgerMapper``
    selects it. The compressor and cipher apply to ledger events exactly as to host events.

    Args:
        transcoder: the application's transcoder, used for non-ledger events only.
        compressor: optional compressor, applied after encoding.
        cipher: optional cipher, applied after compression.

    Source: DESIGN §6; eventsourcing 9.5 ``persistence.Mapper``.
    """

    def __init__(
        self,
        transcoder: Transcoder,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        super().__init__(transcoder, compressor=compressor, cipher=cipher)
        # Per class: its codec, or None for host events (delegated to the library).
        self._by_class: dict[type, _EventCodec | None] = {}
        # Per stored topic: its class and codec (resolving a topic costs more than decoding).
        self._by_topic: dict[str, tuple[type, _EventCodec | None]] = {}

    def handles(self, cls: type) -> bool:
        """Return whether events of ``cls`` are stored with the ledger codec.

        Override in a subclass to opt in classes that cannot carry the :class:`LedgerEvent`
        marker (the conformance suite runs the library's tests with every event opted in).
        Asked once per class per mapper.

        Args:
            cls: a domain event class.

        Returns:
            ``is_ledger_event_class(cls)`` unless overridden.
        """
        return is_ledger_event_class(cls)

    def _codec(self, cls: type) -> _EventCodec | None:
        try:
            return self._by_class[cls]
        except KeyError:
            codec = _codec_for(cls) if self.handles(cls) else None
            self._by_class[cls] = codec
            return codec

    def to_stored_event(self, domain_event: DomainEventProtocol[TAggregateID]) -> StoredEvent:
        """Convert a domain event to a stored event.

        Args:
            domain_event: a ledger event or a host event.

        Returns:
            The stored event; a ledger event's state is msgspec JSON (compressed and encrypted
            when configured).

        Raises:
            ValueError: a ledger event's state would not load back exactly (a naive datetime,
                a value of the wrong type, a NUL character, a NaN or a value JSON cannot
                represent exactly).
        """
        codec = self._codec(type(domain_event))
        if codec is None:
            return super().to_stored_event(domain_event)
        state = dict(vars(domain_event))
        originator_id = state.pop("originator_id")
        originator_version = state.pop("originator_version")
        try:
            stored_state = codec.encode(state)
        except ValueError as exc:
            raise ValueError(
                f"refusing to store {codec.topic} event of operation {originator_id} at position "
                f"{originator_version}: {exc}"
            ) from exc
        if self.compressor:
            stored_state = self.compressor.compress(stored_state)
        if self.cipher:
            stored_state = self.cipher.encrypt(stored_state)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=codec.topic,
            state=stored_state,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[TAggregateID]:
        """Convert a stored event to a domain event, failing closed on a corrupt ledger record.

        Args:
            stored_event: a record read from the event store.

        Returns:
            The domain event; never a partly decoded one.

        Raises:
            CorruptRecordError: the record is a ledger event and cannot be decoded exactly; names
                the operation and position.
            UnreadableEventError: (a ``CorruptRecordError``) the record has a ``ledger.`` topic
                that does not resolve, or a ``class_version`` newer than its class's.
            TopicError: a non-ledger topic does not resolve (the library's behaviour).
            MapperDeserialisationError: a host event's state does not decode (the library's).
        """
        return self.decode_record(stored_event.originator_id, stored_event.originator_version,
                                  stored_event.topic, stored_event.state)

    def decode_record(self, originator_id: Any, originator_version: int, topic: str,
                      state: bytes) -> DomainEventProtocol[TAggregateID]:
        """:meth:`to_domain_event` for a record's columns, without a ``StoredEvent`` around them.

        For readers that fetch many records with one query (projections, batch loads): the
        same rules, the same errors, one object fewer per event.

        Args:
            originator_id: the record's aggregate id (a ``UUID``, or the store's text form).
            originator_version: the record's position in its aggregate's sequence.
            topic: the record's event topic.
            state: the stored state (compressed and encrypted when configured).

        Returns:
            The domain event.

        Raises:
            The errors of :meth:`to_domain_event`.
        """
        try:
            cls, codec = self._by_topic[topic]
        except KeyError:
            try:
                cls = resolve_topic(topic)
            except TopicError as exc:
                if topic.startswith(LEDGER_TOPIC_PREFIX):
                    raise UnreadableEventError(originator_id, originator_version, topic,
                                               f"topic does not resolve: {exc}") from exc
                raise
            codec = self._codec(cls)
            self._by_topic[topic] = (cls, codec)
        if codec is None:
            return super().to_domain_event(StoredEvent(originator_id=originator_id,
                                                       originator_version=originator_version,
                                                       topic=topic, state=state))
        stored_id = originator_id
        if type(originator_id) is not UUID:
            # A class is hashable; the library's lru_cache-typed signature says Hashable.
            originator_id = find_id_convertor(cls, type(originator_id))(originator_id)  # type: ignore[arg-type]
        try:
            if self.cipher:
                state = self.cipher.decrypt(state)
            if self.compressor:
                state = self.compressor.decompress(state)
            return codec.decode(state, originator_id, originator_version)
        except _NewerClassVersion as exc:
            raise UnreadableEventError(stored_id, originator_version, topic, str(exc)) from exc
        # Anything (cipher, decompressor, decoder, an upcaster) failing means the record cannot
        # be read exactly: fail closed, keeping the cause chained for the operator.
        except Exception as exc:  # noqa: BLE001
            raise CorruptRecordError(stored_id, originator_version, topic,
                                     str(exc) or type(exc).__name__) from exc
