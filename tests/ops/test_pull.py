"""rayform pull: a slice's packs into the cache; offline, the one thing it cannot do is fetch."""

from __future__ import annotations

import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import OfflineError
from rayform.ops.pull import pull


def test_an_offline_pull_says_to_unset_offline_not_to_run_pull(tmp_path, monkeypatch):
    client = rayform.Client(f"memory://pull-{tmp_path.name}", cache=tmp_path / "cache")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=1.0, image_size=16)), name="p")
    client.pack(s, 15, workers=1, progress=False)
    client.slices.get(s.id)  # the slice's ref is in the cache; its pack's shards are not
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    with pytest.raises(OfflineError) as info:
        pull(client, s.id, progress=False)
    message = str(info.value)
    assert message.startswith(f"rayform pull {s.id}: ") and "Unset RAYFORM_OFFLINE for the pull" in message
    assert "Run: rayform pull" not in message
    monkeypatch.delenv("RAYFORM_OFFLINE")
    report = pull(client, s.id, progress=False)
    assert report.fetched > 0
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    again = pull(client, s.id, progress=False)  # everything is cached: offline is no obstacle
    assert again.fetched == 0 and again.present == report.fetched + report.present
