"""Health at the scale the issue tells it: 1,000 episodes of real footage, two episodes of each
of the ten planted kinds among them (``planted.real_store``). ``rayform.doctor`` flags every
planted episode with its kind and time, and at most 1% of the clean ones."""

from __future__ import annotations

import pytest
from planted import EPISODES, KINDS, real_store

import rayform


@pytest.mark.slow
def test_doctor_finds_every_planted_kind_among_a_thousand_real_episodes_and_few_clean_ones(tmp_path):
    client, where = real_store(tmp_path / "store")
    assert len(where) == 2 * len(KINDS)

    found = rayform.doctor(client, site="lab", progress=False)
    assert found.episodes == EPISODES and found.measured_now == 0
    by_name = {c.name: c for c in found.flagged}
    for name, (kind, at) in where.items():
        assert name in by_name, f"{name} ({kind}) is not flagged"
        hits = [f for f in by_name[name].findings if f["kind"] == kind]
        assert hits, f"{name}: planted {kind}, found {[f['kind'] for f in by_name[name].findings]}"
        if kind not in ("missing_stream", "duration", "constant"):  # those are of the whole episode
            t = (hits[0]["start_ns"] - by_name[name].start_ns) / 1e9
            assert abs(t - at) < 0.2, f"{name}: {kind} at {t:.2f} s, planted at {at:.2f} s"
    clean_flagged = sorted(set(by_name) - set(where))
    assert len(clean_flagged) <= 0.01 * (EPISODES - len(where)), \
        [(n, [f["kind"] for f in by_name[n].findings]) for n in clean_flagged[:10]]
    assert set(found.kinds) >= set(KINDS)
