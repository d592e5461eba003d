"""ProtoJSON in, protobuf out, fast: what the gRPC binding sends is the JSON the HTTP bindings
write, read into the protobuf message by a reader compiled once per message type.

`json_format.ParseDict` reads a field at a time in Python, with a check and a lookup each: it took
a hundred times a chunk's SSE rendering (bench/grpc_conversions.py, bench/RESULTS.md). A reader
here knows each type's fields by JSON name beforehand, converts the values (enums by name, bytes
from base64, timestamps, `Struct` and `Value`) and builds the message with one constructor call.
Unknown members are left out, as a ProtoJSON reader that ignores unknown fields does.
"""

from __future__ import annotations

import base64
import calendar
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from google.protobuf import message_factory, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from app.http.json_body import render_json

Convert = Callable[[Any], Any]

_SCALARS: dict[int, Convert] = {
    FieldDescriptor.TYPE_STRING: str,
    FieldDescriptor.TYPE_BOOL: bool,
    FieldDescriptor.TYPE_DOUBLE: float,
    FieldDescriptor.TYPE_FLOAT: float,
    # ProtoJSON writes 64-bit integers as strings: int() reads both.
    **dict.fromkeys(
        (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_SINT32,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_FIXED32,
            FieldDescriptor.TYPE_FIXED64,
            FieldDescriptor.TYPE_SFIXED32,
            FieldDescriptor.TYPE_SFIXED64,
        ),
        int,
    ),
}


def _bytes(value: str) -> bytes:
    """ProtoJSON bytes: base64, standard or URL-safe, padded or not."""
    padded = value + "=" * (-len(value) % 4)
    return base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))


def _fill_timestamp(target: timestamp_pb2.Timestamp, value: str) -> None:
    """RFC 3339 (ours: UTC, milliseconds) read by `datetime` in C; the library's reader (for
    nanoseconds, say) is the slower regular-expression one."""
    fraction = value.partition(".")[2]
    try:
        if len(fraction) - len(fraction.lstrip("0123456789")) > 6:
            raise ValueError("finer than datetime keeps")
        stamp = datetime.fromisoformat(value)
    except ValueError:
        target.FromJsonString(value)
        return
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    target.seconds = calendar.timegm(stamp.utctimetuple())
    target.nanos = stamp.microsecond * 1000


def _fill_struct(target: struct_pb2.Struct, value: dict[str, Any]) -> None:
    target.update(value)


def _fill_value(target: struct_pb2.Value, value: Any) -> None:
    holder = struct_pb2.Struct()
    holder.update({"v": value})
    target.CopyFrom(holder.fields["v"])


Fill = Callable[[Any, Any], None]
"""Sets a message (in place) from its ProtoJSON value."""

_WELL_KNOWN: dict[str, Fill] = {
    "google.protobuf.Timestamp": _fill_timestamp,
    "google.protobuf.Struct": _fill_struct,
    "google.protobuf.Value": _fill_value,
}


def _enum(field: FieldDescriptor) -> Convert:
    numbers = {value.name: value.number for value in field.enum_type.values}

    def convert(value: Any) -> int:
        return value if isinstance(value, int) else numbers[value]

    return convert


def _scalar(field: FieldDescriptor) -> Convert:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _enum(field)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _bytes
    return _SCALARS[field.type]


def _fill_of(descriptor: Descriptor) -> Fill:
    return _WELL_KNOWN.get(descriptor.full_name) or _reader(descriptor).fill


def _setter(field: FieldDescriptor) -> Callable[[Message, Any], None]:
    """How one field is set from its ProtoJSON value: sub-messages are filled where they are
    (no message is built to be copied in: that copy was most of a constructor's time)."""
    name = field.name
    message_type = field.message_type if field.type == FieldDescriptor.TYPE_MESSAGE else None
    if message_type is not None and message_type.GetOptions().map_entry:
        value_field = message_type.fields_by_name["value"]
        if value_field.type == FieldDescriptor.TYPE_MESSAGE:
            fill_entry = _fill_of(value_field.message_type)

            def set_message_map(message: Message, value: dict[str, Any]) -> None:
                entries = getattr(message, name)
                for key, item in value.items():
                    fill_entry(entries[key], item)

            return set_message_map
        convert_entry = _scalar(value_field)

        def set_map(message: Message, value: dict[str, Any]) -> None:
            getattr(message, name).update({key: convert_entry(item) for key, item in value.items()})

        return set_map
    if message_type is not None:
        fill = _fill_of(message_type)
        if field.is_repeated:

            def set_messages(message: Message, value: list[Any]) -> None:
                items = getattr(message, name)
                for item in value:
                    fill(items.add(), item)

            return set_messages

        def set_message(message: Message, value: Any) -> None:
            fill(getattr(message, name), value)

        return set_message
    convert = _scalar(field)
    if field.is_repeated:

        def set_scalars(message: Message, value: list[Any]) -> None:
            getattr(message, name).extend(convert(item) for item in value)

        return set_scalars

    def set_scalar(message: Message, value: Any) -> None:
        setattr(message, name, convert(value))

    return set_scalar


_READERS: dict[str, _Reader] = {}


class _Reader:
    """Reads one message type from its ProtoJSON object. Its fields' setters are made on first
    use, so that a recursive type refers to its own reader."""

    def __init__(self, descriptor: Descriptor) -> None:
        self._descriptor = descriptor
        self._class = message_factory.GetMessageClass(descriptor)
        self._setters: dict[str, Callable[[Message, Any], None]] | None = None

    def _compile(self) -> dict[str, Callable[[Message, Any], None]]:
        setters = {}
        for field in self._descriptor.fields:
            setters[field.json_name] = setters[field.name] = _setter(field)
        return setters

    def fill(self, message: Message, value: dict[str, Any]) -> None:
        setters = self._setters
        if setters is None:
            setters = self._setters = self._compile()
        for key, item in value.items():
            setter = setters.get(key)
            if setter is not None and item is not None:
                setter(message, item)

    def __call__(self, value: dict[str, Any]) -> Message:
        message = self._class()
        self.fill(message, value)
        return message


def _reader(descriptor: Descriptor) -> _Reader:
    reader = _READERS.get(descriptor.full_name)
    if reader is None:
        reader = _READERS[descriptor.full_name] = _Reader(descriptor)
    return reader


def reader(message_class: type[Message]) -> Callable[[dict[str, Any]], Message]:
    """The reader of `message_class` from a ProtoJSON object (a dict)."""
    return _reader(message_class.DESCRIPTOR)


def protobuf_of(result: Any, message_class: type[Message]) -> Message:
    """An operation's JSON result (a dict, which may hold stored JSON as it is) as the protobuf
    message of the same ProtoJSON shape."""
    return _reader(message_class.DESCRIPTOR)(orjson.loads(render_json(result)))
