"""A source's files, on local disk or at an fsspec URL (``s3://bucket/dataset``, ``gs://…``):
read, listed and opened the same way, so a converter reads a dataset where it lies. A remote
file is opened as a seekable file (fsspec reads the ranges asked, in blocks), so a video of
many episodes is read from the keyframe before each one, not whole."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path, PurePath, PurePosixPath
from typing import IO, Any

from rayform.errors import InvalidInput


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
        if self.fs is None:
            try:
                return Path(path).read_text()
            except NotADirectoryError:
                raise InvalidInput(f"{self.url}: not a folder (a dataset is read from its folder)") from None
            except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
                raise InvalidInput(f"{self.url}: cannot read {path} ({type(e).__name__})") from None
        try:
            return str(self.fs.cat_file(str(path)).decode())
        except FileNotFoundError:
            raise
        except Exception as e:
            raise InvalidInput(f"{self.url}: cannot read {path} ({type(e).__name__}: {str(e)[:120]})") from None

    def is_file(self, path: PurePath) -> bool:
        return Path(path).is_file() if self.fs is None else bool(self.fs.isfile(str(path)))

    def size(self, path: PurePath) -> int:
        return Path(path).stat().st_size if self.fs is None else int(self.fs.size(str(path)))

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
        blocks (a TFRecord shard is read sequentially, record after record)."""
        if self.fs is None:
            return open(path, "rb")
        return self.fs.open(str(path), "rb", block_size=8 << 20)  # type: ignore[no-any-return]
