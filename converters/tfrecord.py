"""TFRecord files of ``tf.train.Example`` records, read without TensorFlow.

A TFRecord file is a run of records, each::

    uint64 length | uint32 masked crc32c(length) | length bytes | uint32 masked crc32c(bytes)

(little-endian; the mask is TensorFlow's: ``((crc >> 15) | (crc << 17)) + 0xa282ead8``). Both
checksums are checked (crc32c by ``google-crc32c``), and a length is bounded by what is left of
the file before anything is read or allocated. The records are parsed as ``tf.train.Example``
by protobuf, from the message's definition built here (TensorFlow's ``example.proto`` and
``feature.proto``, the three lists and the map of features), so no generated code and no
TensorFlow are needed. Every fault is one :class:`InvalidInput` naming file, record and offset.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from rayform.errors import InvalidInput

_HEADER = struct.Struct("<QI")
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes | memoryview) -> int:
    """TensorFlow's masked crc32c of ``data``."""
    import google_crc32c

    crc = int(google_crc32c.value(bytes(data)))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def records(f: IO[bytes], size: int, what: str) -> Iterator[list[bytes]]:
    """The records of a TFRecord file opened as ``f`` (``size`` bytes), each checked, each in a
    list of one its consumer pops: this generator keeps no reference to a record it has yielded,
    so an episode of gigabytes is held once, not twice, while it is converted."""
    offset = index = 0
    while offset < size:
        where = f"{what}: record {index} at byte {offset}"
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise InvalidInput(f"{where}: the file ends inside a record's header (truncated)")
        length, length_crc = _HEADER.unpack(head)
        if masked_crc(head[:8]) != length_crc:
            raise InvalidInput(f"{where}: the length's checksum does not match (a damaged file)")
        if length > size - offset - _HEADER.size - 4:
            raise InvalidInput(f"{where}: a record of {length} bytes, more than is left of the file (truncated)")
        data = f.read(length)  # read apart from its checksum: a record of gigabytes is never copied
        tail = f.read(4)
        if len(data) < length or len(tail) < 4:
            raise InvalidInput(f"{where}: the file ends inside the record (truncated)")
        if masked_crc(data) != struct.unpack("<I", tail)[0]:
            raise InvalidInput(f"{where}: the record's checksum does not match (a damaged file)")
        box = [data]
        del data  # the consumer takes the one reference (box.pop()) and frees the record once parsed
        yield box
        offset += _HEADER.size + length + 4
        index += 1


@functools.lru_cache(maxsize=1)
def _example_class() -> Any:
    """``tf.train.Example`` as a protobuf message class, from its definition."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="rayform/tf_example.proto", package="rayform.tf",
                                               syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> Any:
        m = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
        return m

    repeated, optional = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    message("BytesList", ("value", 1, F.TYPE_BYTES, repeated, ""))
    message("FloatList", ("value", 1, F.TYPE_FLOAT, repeated, ""))
    message("Int64List", ("value", 1, F.TYPE_INT64, repeated, ""))
    feature = message("Feature", ("bytes_list", 1, F.TYPE_MESSAGE, optional, ".rayform.tf.BytesList"),
                      ("float_list", 2, F.TYPE_MESSAGE, optional, ".rayform.tf.FloatList"),
                      ("int64_list", 3, F.TYPE_MESSAGE, optional, ".rayform.tf.Int64List"))
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    features = message("Features", ("feature", 1, F.TYPE_MESSAGE, repeated, ".rayform.tf.Features.FeatureEntry"))
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=optional)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=optional, type_name=".rayform.tf.Feature")
    entry.options.map_entry = True
    message("Example", ("features", 1, F.TYPE_MESSAGE, optional, ".rayform.tf.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("rayform.tf.Example"))



def parse_example(data: bytes, what: str) -> dict[str, np.ndarray | list[bytes]]:
    """An Example's features: float lists as float32 arrays, int64 lists as int64 arrays, bytes
    lists as lists of bytes."""
    from google.protobuf.message import DecodeError

    example = _example_class()()
    try:
        example.ParseFromString(data)
    except DecodeError as e:
        raise InvalidInput(f"{what}: not a tf.train.Example ({str(e)[:120]})") from None
    del data  # parsed: where the caller gave its only reference (rlds), the record goes now
    out: dict[str, np.ndarray | list[bytes]] = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "float_list":
            out[key] = np.array(feature.float_list.value, np.float32)
        elif kind == "int64_list":
            out[key] = np.array(feature.int64_list.value, np.int64)
        elif kind == "bytes_list":
            out[key] = list(feature.bytes_list.value)
        else:  # an empty Feature: no values
            out[key] = np.empty(0, np.float32)
    return out
