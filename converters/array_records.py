"""The records of an ArrayRecord file (TFDS's ``array_record`` shards), read with the
``array-record`` package's own reader (Riegeli chunks, checksummed), never a parser of ours."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from rayform.converters.source_files import SourceFiles
from rayform.errors import InvalidInput


def array_records(files: SourceFiles, path: object, what: str, expected: int) -> Iterator[list[bytes]]:
    """Each record of the ArrayRecord file at ``path`` in order, in a list of one to pop (as
    ``tfrecord.records``); ``expected`` as dataset_info.json counts them (another count is
    refused before a record is read)."""
    try:
        from array_record.python.array_record_module import ArrayRecordReader
    except ImportError:
        raise InvalidInput(f"{what}: array_record shards are read with the array-record package: "
                           "pip install 'rayform[rlds]'") from None
    with files.local(path) as local:  # type: ignore[arg-type]
        reader = _checked(lambda: ArrayRecordReader(local, "readahead_buffer_size:4M,max_parallelism:0"),
                          f"{what}")
        try:
            count = int(_checked(reader.num_records, f"{what}: its index"))
            if count != expected:
                raise InvalidInput(f"{what}: {count} records, dataset_info.json lists {expected}")
            for index in range(count):
                yield [_checked(reader.read, f"{what}: record {index}")]  # as tfrecord.records: popped
        finally:
            _checked(reader.close, f"{what}: its end")


def _checked(call: Callable[[], Any], what: str) -> Any:
    """The reader's call; its errors (RuntimeError, ValueError: a checksum, a truncated chunk) as
    one InvalidInput naming the shard."""
    try:
        return call()
    except Exception as e:
        raise InvalidInput(f"{what} is unreadable, a damaged file ({type(e).__name__}: {str(e)[:160]})") from None
