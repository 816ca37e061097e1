"""``rayform.doctor(client, ...)``: the flagged episodes of a slice, a site or the whole store, from the
catalog; segments ingested before health signals are measured now, on any
``concurrent.futures.Executor`` (a Dask or Ray cluster's) or a pool of ours (``rayform.jobs``).
``rayform doctor`` prints what this returns."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from rayform.errors import InvalidInput, raised_here
from rayform.jobs import JobRunner, Run
from rayform.ops import doctor as doctor_module
from rayform.recordings.segment_writer import check_site

PER_PROCESS = 50  # unmeasured segments that one process measures faster than a pool starts
COLUMNS = ["id", "name", "site", "version", "task", "duration_s", "start_ns", "stream_names", "health", "flags"]


@dataclass
class Diagnosis:
    """What ``doctor`` found: how many episodes it looked at, how many of them it measured now
    (ingested before signals), and the flagged ones with their findings."""

    episodes: int
    measured_now: int
    flagged: list[doctor_module.Checked] = field(default_factory=list)

    @property
    def kinds(self) -> dict[str, int]:
        """How many findings of each kind, over the flagged episodes."""
        return dict(sorted(Counter(f["kind"] for c in self.flagged for f in c.findings).items()))


@raised_here
def doctor(client: Any, slice_: Any = None, *, site: str | None = None, thresholds: Mapping[str, float] | None = None,
           executor: Executor | None = None, workers: int | None = None, progress: bool = True) -> Diagnosis:
    """The episodes a health signal flags in a ``rayform.Client``'s store: in slice ``slice_`` (a
    Slice, or its name or id), at ``site``, or everywhere, as ``rayform doctor`` says them.
    ``thresholds`` (signal -> value) flag from other values than the ingest's. Segments ingested
    before health signals are measured now, on ``executor`` (any ``concurrent.futures.Executor``,
    e.g. a Dask cluster's) or a process pool of ``workers``."""
    name = getattr(slice_, "id", slice_)
    return diagnose(client, name, site, doctor_module.Thresholds(dict(thresholds or {})),
                    Run(executor, workers, progress))


def diagnose(client: Any, slice_name: str | None = None, site: str | None = None,
             thresholds: doctor_module.Thresholds | None = None, run: Run | None = None) -> Diagnosis:
    """The flagged episodes of slice ``slice_name``, of ``site``, or of the store. Segments whose
    catalog row has no health (ingested before signals) are measured on ``run.executor``, else a
    pool of ``run.workers`` processes (default: every core past ``PER_PROCESS`` of them)."""
    if slice_name and site:
        raise InvalidInput("doctor: name a slice or a site (--site), not both")
    if slice_name:
        table = _of_slice(client, slice_name)
    else:
        table = client.segments.catalog.latest(check_site(site) if site else None, columns=COLUMNS)
    unmeasured = table.column("health").null_count
    run = run or Run()
    workers = run.workers or ((os.cpu_count() or 1) if unmeasured > PER_PROCESS else 1)

    def measured(versions: list[tuple[str, str]]) -> Iterator[dict[str, Any]]:
        ref = client.store.ref
        with JobRunner(run.executor, workers) as jobs:
            yield from _bar(jobs.each(doctor_module.measure_stored, [(ref, sid, v) for sid, v in versions]),
                            len(versions), run.progress)

    return Diagnosis(table.num_rows, unmeasured, doctor_module.check(table, measured, thresholds))


def _of_slice(client: Any, name: str) -> Any:
    """The catalog's rows of a slice's segment versions, older versions' included with the
    health measured when they were written (one row a version); a version no catalog row lists
    (a store from before catalogs) gets a row from its manifest, its health measured now."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rayform.recordings.catalog_parts import unique_versions

    chosen = client.slices.get(name)
    wanted = {f"{s.id}@{s.version}" for s in chosen.segments}
    table = client.segments.catalog.table(columns=[*COLUMNS, "recorded"])
    keys = pc.binary_join_element_wise(table.column("id"), table.column("version"), "@")
    # one row a version (concurrent compactions may have left two), by the rule every reader keeps
    mine = unique_versions(table.filter(pc.is_in(keys, value_set=pa.array(sorted(wanted), pa.string())))).select(COLUMNS)
    older = sorted(wanted - set(pc.binary_join_element_wise(mine.column("id"), mine.column("version"), "@")
                                .to_pylist()))
    if not older:
        return mine
    rows = []
    for key in older:
        sid, version = key.split("@")
        seg = client.segments.get(sid, version)
        start = min(int(seg.timestamps(n)[0]) for n in seg.streams)
        end = max(int(seg.timestamps(n)[-1]) for n in seg.streams)
        rows.append({"id": sid, "name": seg.name, "site": seg.site, "version": version, "task": seg.task,
                     "duration_s": (end - start) / 1e9, "start_ns": start, "stream_names": sorted(seg.streams),
                     "health": None, "flags": None})
    return pa.concat_tables([mine, pa.Table.from_pylist(rows, schema=mine.schema)])


def _bar(items: Iterable[Any], total: int, progress: bool) -> Iterable[Any]:
    if not progress or not total:
        return items
    from tqdm.auto import tqdm

    bar: Iterable[Any] = tqdm(items, total=total, desc="measuring", unit="episode", leave=False)
    return bar
