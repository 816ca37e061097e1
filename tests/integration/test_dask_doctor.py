"""``rayform.doctor`` on a Dask LocalCluster: segments ingested before health signals are measured
on the cluster's workers, and the findings are the ones one process finds."""

from __future__ import annotations

import pytest
from planted import plant, without_health

import rayform
from rayform.converters.demo import DemoConfig, demo_episode

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow


def test_doctor_measures_a_store_from_before_health_signals_on_a_dask_cluster(tmp_path):
    config = DemoConfig(episodes=12, seconds=3.0, seed=5, image_size=32)
    client = rayform.Client(tmp_path / "store")
    batch = [("lab", name, streams, meta) for name, streams, meta in (demo_episode(config, e) for e in range(12))]
    for kind in ("spike", "frozen"):
        name, streams, meta = demo_episode(config, 100 + len(batch))
        batch.append(("lab", f"planted_{kind}", plant(kind, streams)[0], meta))
    client.segments.add_many(batch)
    without_health(client)

    alone = rayform.doctor(client, site="lab", workers=1, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as dask:
        on_dask = rayform.doctor(client, site="lab", executor=dask.get_executor(), progress=False)
        ran = dask.run(lambda dask_worker: dask_worker.state.executed_count)
    assert on_dask.measured_now == alone.measured_now == 14
    assert {c.name for c in on_dask.flagged} == {"planted_spike", "planted_frozen"}
    assert [(c.id, c.findings) for c in on_dask.flagged] == [(c.id, c.findings) for c in alone.flagged]
    assert len(ran) == 2 and all(n > 0 for n in ran.values()), f"a worker measured nothing: {ran}"
