"""A pack on a Dask LocalCluster: the same shards, byte for byte, as one process and as two."""

from __future__ import annotations

import pytest

from rayform.read.reader import PackReader

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow

SPEC = dict(shard_bytes=100_000, samples_per_task=16)


def test_a_dask_cluster_packs_the_same_shards(demo_client):
    client, s = demo_client
    one = client.pack(s, 15, workers=1, progress=False, **SPEC)
    two = client.pack(s, 15, workers=2, progress=False, force=True, **SPEC)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as dask:
        on_dask = client.pack(s, 15, executor=dask.get_executor(), progress=False, force=True, **SPEC)
        ran = dask.run(lambda dask_worker: len(dask_worker.state.tasks) + dask_worker.state.executed_count)
    assert len(one.shards) >= 4
    assert [x.sha256 for x in one.shards] == [x.sha256 for x in two.shards] == [x.sha256 for x in on_dask.shards]
    assert one.digest == two.digest == on_dask.digest
    assert len(ran) == 2 and all(n > 0 for n in ran.values()), f"a worker ran nothing: {ran}"
    reader = PackReader(client.store, on_dask, on_dask.members)
    assert sum(1 for _ in reader.raw_many(range(on_dask.samples))) == on_dask.samples


def test_a_dask_cluster_ingests_a_lerobot_dataset_in_tasks_of_episodes(real_data, tmp_path):
    """Each task converts a few episodes and writes their packets to the store itself; the
    segments are the ones a local ingest makes, blob for blob."""
    import rayform
    from rayform.converters.ingest import SourceJob, _tasks
    from rayform.converters.source_options import SourceOptions

    root = real_data / "lerobot_v30_so101_ros2_example"
    local = rayform.Client(tmp_path / "local")
    here = local.ingest("lerobot", [root], "so101", progress=False)
    remote = rayform.Client(tmp_path / "dask")
    assert len(_tasks(SourceJob(remote.store.ref, "lerobot", str(root), "so101", SourceOptions()), 2)) == 6
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as dask:
        there = remote.ingest("lerobot", [root], "so101", executor=dask.get_executor(), slice_name="so101",
                              progress=False)
        ran = dask.run(lambda dask_worker: dask_worker.state.executed_count)
    assert [(r.id, r.version) for r in there.segments] == [(r.id, r.version) for r in here.segments]
    assert all(n > 0 for n in ran.values()), f"a worker ran nothing: {ran}"
    assert remote.slices.get("so101").segments == there.slice.segments
