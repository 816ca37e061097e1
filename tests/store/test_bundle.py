"""Bundles: many small blobs as one, each member still named and verified by its own hash."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rayform.codec import records
from rayform.errors import IntegrityError, Malformed
from rayform.store.bundle import MAGIC, Bundle, BundleWriter, pack_members
from rayform.store.content import sha256_hex
from rayform.store.store import Store


@given(st.lists(st.binary(max_size=300), max_size=30))
def test_every_member_reads_back_by_its_name_and_the_bytes_depend_on_the_members_only(blobs):
    members = {sha256_hex(b): b for b in blobs}
    data = pack_members(members)
    assert pack_members(dict(reversed(list(members.items())))) == data
    bundle = Bundle(sha256_hex(data), data)
    assert len(bundle) == len(members) and sorted(bundle.digests()) == sorted(members)
    for digest, blob in members.items():
        assert digest in bundle and bytes(bundle.get(digest)) == blob
    assert sha256_hex(b"not a member") not in bundle
    with pytest.raises(KeyError):
        bundle.get(sha256_hex(b"not a member"))


def test_a_corrupt_member_is_refused_naming_it():
    members = {sha256_hex(b): b for b in (b"first member", b"second member")}
    data = bytearray(pack_members(members))
    data[-3] ^= 0xFF  # in the last member's bytes
    bundle = Bundle("0" * 64, bytes(data))
    last = max(members, key=lambda d: bytes.fromhex(d))
    with pytest.raises(IntegrityError, match=f"member {last[:16]}"):
        bundle.get(last)


def _forged(index: np.ndarray, payload: bytes) -> bytes:
    head = records.to_npy(index)
    return MAGIC + struct.pack("<Q", len(head)) + head + payload


def _row(digest: bytes, offset: int, size: int) -> list[int]:
    return [*np.frombuffer(digest, "<u8").tolist(), offset, size]


@pytest.mark.parametrize("case", ["magic", "index size", "outside", "unsorted", "dtype", "wrapped", "overlap",
                                  "twice", "wrapped sum", "backwards"])
def test_a_hostile_bundle_is_one_malformed(case):
    a, b = sorted([os.urandom(32), os.urandom(32)])
    data = {
        "magic": b"NOTABUNDLE" + b"\0" * 40,
        "index size": MAGIC + struct.pack("<Q", 1 << 40),
        "outside": _forged(np.array([_row(a, 0, 4), _row(b, 4, 1 << 30)], "<u8"), b"12345678"),
        "unsorted": _forged(np.array([_row(b, 0, 4), _row(a, 4, 4)], "<u8"), b"12345678"),
        "dtype": _forged(np.arange(4, dtype=np.int64), b""),
        "wrapped": _forged(np.array([_row(a, 2**64 - 2, 4)], "<u8"), b"12345678"),
        "overlap": _forged(np.array([_row(a, 0, 6), _row(b, 4, 4)], "<u8"), b"12345678"),
        "twice": _forged(np.array([_row(a, 0, 4), _row(a, 4, 4)], "<u8"), b"12345678"),
        "wrapped sum": _forged(np.array([_row(a, 4, 2**64 - 2)], "<u8"), b"12345678"),
        "backwards": _forged(np.array([_row(a, 4, 4), _row(b, 0, 4)], "<u8"), b"12345678"),
    }[case]
    with pytest.raises(Malformed):
        Bundle("0" * 64, data)


def test_the_writer_bundles_small_blobs_and_stores_large_ones_loose(tmp_path):
    store = Store(tmp_path / "store")
    writer = BundleWriter(store, small=100, bundle_bytes=250)
    small = [writer.put_blob(bytes([i]) * 90) for i in range(3)]
    large = writer.put_blob(b"x" * 101)
    assert store.has_blob(large) and not any(store.has_blob(d) for d in small)
    assert writer.full and writer.pending == 270
    assert writer.put_blob(bytes([0]) * 90) == small[0] and writer.pending == 270  # the same member once
    bundle = writer.flush()
    assert writer.pending == 0 and writer.flush() is None and writer.bundles == [bundle]
    read = Bundle(bundle, store.get_blob(bundle))
    assert sorted(read.digests()) == sorted(small)


def test_a_member_whose_name_ends_in_zero_bytes_is_found():
    """numpy keeps a fixed-width bytes value without its trailing NULs: a digest ending in 00 must
    still be found (and one that differs from a member only there must not)."""
    i = 0
    while not sha256_hex(b"%d" % i).endswith("00"):
        i += 1
    blob = b"%d" % i
    members = {sha256_hex(b): b for b in (blob, b"another", b"and another")}
    bundle = Bundle("0" * 64, pack_members(members))
    assert bytes(bundle.get(sha256_hex(blob))) == blob
    assert sha256_hex(blob)[:-2] + "01" not in bundle
