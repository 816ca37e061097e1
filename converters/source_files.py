"""A source's files, on local disk or at an fsspec URL (``s3://bucket/dataset``, ``gs://…``):
read, listed and opened the same way, so a converter reads a dataset where it lies. A remote
file is opened as a seekable file (fsspec reads the ranges asked, in blocks), so a video of
many episodes is read from the keyframe before each one, not whole."""

from __future__ import annotations

import contextlib
import os
import posixpath
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePath, PurePosixPath
from typing import IO, Any

from rayform.errors import InvalidInput
from rayform.sizes import format_size

MAX_TEXT_BYTES = 64 << 20  # a schema, an index or an info file: read whole, so bounded first


def is_url(source: str | os.PathLike[str]) -> bool:
    return "://" in os.fspath(source)


class SourceFiles:
    """The files below ``root`` (a local path, or a URL with ``storage_options``)."""

    def __init__(self, root: str | os.PathLike[str], storage_options: dict[str, Any] | None = None):
        self.url = os.fspath(root)
        self.fs: Any = None
        if is_url(self.url):
            import fsspec

            self.fs, path = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
            self.root: PurePath = PurePosixPath(path)
        else:
            self.root = Path(self.url)

    def inside(self, path: PurePath, what: str) -> PurePath:
        """``path``, checked to lie below the root (a dataset's files never lead out of it)."""
        found: PurePath
        if self.fs is None:
            found = Path(path).resolve()
            ok = found.is_relative_to(Path(self.root).resolve())
        else:
            found = PurePosixPath(posixpath.normpath(str(path)))
            ok = found.is_relative_to(self.root)
        if not ok:
            raise InvalidInput(f"{self.url}: {what} leads out of the dataset's folder")
        return found

    def read_text(self, path: PurePath) -> str:
        """A text file read whole: refused past ``MAX_TEXT_BYTES``, and an unreachable source said
        as such in one line."""
        if self.fs is None:
            try:
                if Path(path).stat().st_size > MAX_TEXT_BYTES:
                    raise InvalidInput(f"{path}: larger than the {format_size(MAX_TEXT_BYTES)} a schema or index may be")
                return Path(path).read_text()
            except NotADirectoryError:
                raise InvalidInput(f"{self.url}: not a folder (a dataset is read from its folder)") from None
            except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
                raise InvalidInput(f"{self.url}: cannot read {path} ({type(e).__name__})") from None
        try:
            data = self.fs.cat_file(str(path), start=0, end=MAX_TEXT_BYTES + 1)  # one ranged GET, no HEAD
            if len(data) > MAX_TEXT_BYTES:
                raise InvalidInput(f"{self.url}: {path.name} is larger than the {format_size(MAX_TEXT_BYTES)} a "
                                   "schema or index may be")
            return str(data.decode())
        except (FileNotFoundError, InvalidInput):
            raise
        except UnicodeDecodeError:
            raise InvalidInput(f"{self.url}: {path.name} is not text") from None
        except Exception as e:  # the endpoint, the network or the credentials: never the file's content
            raise InvalidInput(f"{self.url}: cannot reach {path.name} ({type(e).__name__}: {str(e)[:120]}); check "
                               "the source's address and its options (--source-option endpoint_url=…, key=…)") from None

    @contextlib.contextmanager
    def local(self, path: PurePath) -> Iterator[str]:
        """A local path to the file: itself, or a remote one copied to a temporary file, deleted
        after (for readers that open paths only, as ArrayRecord's)."""
        if self.fs is None:
            yield str(path)
            return
        with tempfile.TemporaryDirectory(prefix="rayform-source-") as folder:
            copy = os.path.join(folder, "shard")
            self.fs.get_file(str(path), copy)
            yield copy

    def is_file(self, path: PurePath) -> bool:
        return Path(path).is_file() if self.fs is None else bool(self.fs.isfile(str(path)))

    def glob(self, folder: PurePath, suffix: str) -> list[PurePath]:
        """The files below ``folder`` (at any depth) whose names end in ``suffix``, sorted."""
        if self.fs is None:
            return sorted(p for p in Path(folder).rglob(f"*{suffix}") if p.is_file())
        return sorted(PurePosixPath(p) for p in self.fs.find(str(folder)) if p.endswith(suffix))

    def open(self, path: PurePath) -> IO[bytes] | str:
        """For a reader that takes either (pyarrow, PyAV): a local path, or a remote file opened."""
        if self.fs is None:
            return str(path)
        return self.fs.open(str(path), "rb")  # type: ignore[no-any-return]

    def reader(self, path: PurePath) -> IO[bytes]:
        """A file opened to be read through from start to end: locally, or at its URL in large
        blocks (a TFRecord shard is read sequentially, record after record). Its size is
        ``reader_size``; FileNotFoundError where there is no such file (one request, remote)."""
        if self.fs is None:
            return open(path, "rb")
        return self.fs.open(str(path), "rb", block_size=8 << 20)  # type: ignore[no-any-return]


def reader_size(f: IO[bytes]) -> int:
    """The size of a file ``SourceFiles.reader`` opened (known from opening it: no request)."""
    size = getattr(f, "size", None)
    return int(size) if size is not None else os.fstat(f.fileno()).st_size
