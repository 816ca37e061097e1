"""The records of an ArrayRecord file (TFDS's ``array_record`` shards), read with the
``array-record`` package's own reader (Riegeli chunks, checksummed), never a parser of ours."""

from __future__ import annotations

from collections.abc import Iterator

from rayform.converters.source_files import SourceFiles
from rayform.errors import InvalidInput


def array_records(files: SourceFiles, path: object, what: str, expected: int) -> Iterator[bytes]:
    """Each record of the ArrayRecord file at ``path`` in order; ``expected`` as
    dataset_info.json counts them (another count is refused before a record is read)."""
    try:
        from array_record.python.array_record_module import ArrayRecordReader
    except ImportError:
        raise InvalidInput(f"{what}: array_record shards are read with the array-record package: "
                           "pip install 'rayform[rlds]'") from None
    with files.local(path) as local:  # type: ignore[arg-type]
        try:
            reader = ArrayRecordReader(local, "readahead_buffer_size:4M,max_parallelism:0")
        except Exception as e:  # the library raises ValueError/RuntimeError on a file it cannot open
            raise InvalidInput(f"{what}: not an ArrayRecord file ({type(e).__name__}: {str(e)[:120]})") from None
        try:
            count = int(reader.num_records())
            if count != expected:
                raise InvalidInput(f"{what}: {count} records, dataset_info.json lists {expected}")
            for index in range(count):
                try:
                    data = reader.read()
                except Exception as e:
                    raise InvalidInput(f"{what}: record {index}: unreadable ({type(e).__name__}: {str(e)[:120]}; "
                                       "a damaged file)") from None
                yield data
        finally:
            reader.close()
