"""Forked DataLoader workers that do not copy their parent's heap.

A forked worker shares its parent's memory until it writes to a page. Python's cyclic
garbage collector writes to every container object it scans (its bookkeeping lives in each
object's header), so the worker's first full collection copies every page of the parent's
Python heap into the worker: the parent's manifests, slices and anything else it holds
(tens of MB for a slice of ten thousand episodes, per worker, counted in its RSS). Moving
the parent's objects to the collector's permanent generation for the instant of the fork
(``gc.freeze``, undone in the parent right after) keeps the worker's collector off them; the
worker still frees what it makes. Registered once, when ``rayform.torch`` is imported.
"""

from __future__ import annotations

import gc
import os

_registered = False


def freeze_heap_at_fork() -> None:
    global _registered
    if not _registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=gc.freeze, after_in_parent=gc.unfreeze)
        _registered = True
