"""An episode's health, measured once at ingest from the bytes and values in hand: what tells a
frozen camera, a joint spike, a stuck stream or dropped frames from a good episode.

Each signal is a number with the time range where it is worst (``Finding``); it becomes a flag
where it crosses its threshold (``THRESHOLDS``, why each is where it is in docs/design.md):

- ``frozen``: a camera's longest run of identical consecutive frames, in seconds (encoded
  frames compared byte for byte, raw ones by value; a recorded video by its packets: inter
  frames of a few bytes, that say "as before", in a run);
- ``blank``: black or blank frames, counted: a frame encoded far smaller than its stream's
  median (a quarter and six deviations under it: a featureless image compresses to its headers)
  is decoded, and is blank if its pixels hardly vary;
  a raw frame by its pixels;
- ``dropped``: the fraction of a stream's frames missing from gaps wider than twice its median
  period (a USB camera loses one now and then: a twentieth is a fault);
- ``gap``: the longest such gap, in seconds;
- ``duplicate_time``: consecutive equal timestamps, counted;
- ``constant``: elements of an array stream that never change over the episode, counted
  (every stream of a healthy robot moves at least a little, or is a flag or a setting);
- ``spike``: the largest robust z of an array value against its neighbours (the residual of a
  15-sample running median, over 1.4826 × its median absolute deviation): 5 samples of 1e6 among
  joints in radians are millions, a real fast motion tens at most;
- ``pose_jump``: the same robust z of a pose stream's step lengths;
- ``out_of_range``: samples of an array stream outside the range it declares (``limits``: a
  joint's limits, an action's bounds), counted: a value past a limit the robot cannot reach is
  a unit mix-up, a calibration lost or a sensor fault;
- ``misaligned``: how far, in seconds, a stream starts after the others (the median of their
  first timestamps) or ends before them: a camera that came up late, a recorder that stopped
  early, a stream from another take. Every step of such a stretch is a sample without it.

Episode-level signals that need the population (duration outliers within a site and task, a
stream the site usually has and the episode lacks) are ``rayform doctor``'s, from the catalog.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform.codec import imagecodec
from rayform.errors import RayformError
from rayform.recordings import array_health
from rayform.recordings.streams import median_period

# flag where the signal reaches the threshold
THRESHOLDS = {"frozen": 1.0, "blank": 1, "dropped": 0.05, "gap": 0.5, "duplicate_time": 1, "constant": 1,
              "spike": 50.0, "pose_jump": 50.0, "misaligned": 1.0, "out_of_range": 1}
KINDS = tuple(THRESHOLDS)
KEPT_FROM = 0.25  # a finding under this share of its threshold is not kept (its kind's worst value is)
_SMALL = 0.25  # an encoded frame this fraction (and 6 deviations) under its stream's median size is looked at
_FLAT = 2.0  # ... and is blank if its pixels vary less than this (std, 8-bit levels)
# an inter packet this small repeats its reference picture (x264's: 9-13 bytes; a still scene's noise takes 40+)
_TINY_PACKET = 24
_SHORT = 256  # a stream of at most this many samples is first screened for a finding with Python's lists
MAD_TO_STD = array_health.MAD_TO_STD


@dataclass(frozen=True)
class Finding:
    """One signal of one stream: its value and the time range where it is worst."""

    kind: str
    stream: str
    value: float
    start_ns: int
    end_ns: int

    @property
    def flagged(self) -> bool:
        return self.value >= THRESHOLDS[self.kind]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "stream": self.stream, "value": round(float(self.value), 6),
                "start_ns": int(self.start_ns), "end_ns": int(self.end_ns)}


def timing(name: str, ts: np.ndarray) -> list[Finding]:
    """Gaps wider than twice the median period, and repeated timestamps."""
    out: list[Finding] = []
    if len(ts) < 3:
        return out
    d = np.diff(ts)
    period = median_period(ts)
    if len(ts) <= _SHORT:  # the usual clean clock said so from a list (numpy's calls cost more)
        spacing = d.tolist()
        if min(spacing) != 0 and max(spacing) <= 2 * period:
            return out  # no repeated time, no gap past twice the median period
    if period > 0:
        wide = d > 2 * period
        if wide.any():
            missing = float((np.rint(d[wide] / period) - 1).sum())
            worst = int(np.flatnonzero(wide)[int(np.argmax(d[wide]))])
            out.append(Finding("dropped", name, missing / (len(ts) + missing), int(ts[worst]), int(ts[worst + 1])))
            out.append(Finding("gap", name, float(d[worst]) / 1e9, int(ts[worst]), int(ts[worst + 1])))
    same = np.flatnonzero(d == 0)
    if len(same):
        out.append(Finding("duplicate_time", name, float(len(same)), int(ts[same[0]]), int(ts[same[-1] + 1])))
    return out


def frames(name: str, ts: np.ndarray, encoded: Sequence[bytes | memoryview] | np.ndarray) -> list[Finding]:
    """A camera's frozen stretches and blank frames (encoded frames as bytes, or raw ones)."""
    if isinstance(encoded, np.ndarray):
        flat = encoded.reshape(len(encoded), -1)
        same = np.flatnonzero(np.all(flat[1:] == flat[:-1], axis=1)).tolist() if len(flat) > 1 else []
        blank = flat.std(axis=1) < 1.0 if flat.dtype.kind in "ui" else np.zeros(len(flat), bool)
    elif not len(encoded):
        return []
    else:
        # as lists: a camera's few repeats and its median size cost no numpy call (an episode's
        # fixed cost: what weighs on short ones)
        listed = list(map(len, encoded))
        # only frames of one size can be the same; their bytes compared, not copied
        same = [i for i, (a, b) in enumerate(zip(listed, listed[1:])) if a == b and encoded[i + 1] == encoded[i]]
        blank = None
        median = sorted(listed)[len(listed) // 2]
        if min(listed) < (1 - _SMALL) * median:  # only then is a frame far smaller than its stream's median
            sizes = np.asarray(listed, np.int64)
            blank = np.zeros(len(encoded), bool)
            small = median - max(6 * MAD_TO_STD * float(np.median(np.abs(sizes - median))), _SMALL * median)
            for i in np.flatnonzero(sizes < small):  # ... decoded, to see
                blank[i] = _featureless(encoded[int(i)])
    out = _frozen(name, ts, same)
    if blank is not None and blank.any():
        at = np.flatnonzero(blank)
        out.append(Finding("blank", name, float(len(at)), int(ts[at[0]]), int(ts[at[-1]])))
    return out


def _featureless(data: bytes | memoryview) -> bool:
    try:
        image = imagecodec.decode(data, imagecodec.sniff(bytes(data[:8])))
    except RayformError:  # a frame that does not decode is not "blank": the reader says what it is
        return False
    return float(image.std()) < _FLAT


def video(name: str, ts: np.ndarray, packet_times: np.ndarray, sizes: np.ndarray, keyframes: np.ndarray) -> list[Finding]:
    """A recorded video's frozen stretches, from its packets alone (nothing decoded): an inter
    packet of a few bytes repeats its reference picture."""
    order = np.argsort(packet_times, kind="stable")
    shown = np.isin(packet_times[order], ts)
    keys = keyframes[order][shown]
    tiny = (sizes[order][shown] <= _TINY_PACKET) & ~keys
    if len(tiny) != len(ts):
        return []
    # a keyframe between tiny inter frames is the same picture coded again: the run goes on
    inside = keys & np.concatenate([[False], tiny[:-1]]) & np.concatenate([tiny[1:], [False]])
    return _frozen(name, ts, np.flatnonzero((tiny | inside)[1:]).tolist())


def _frozen(name: str, ts: np.ndarray, same: list[int]) -> list[Finding]:
    """The longest run of frames each the same as the one before (``same``: ascending, each i
    where frame i+1 is frame i), found in the list: a camera's few repeats cost no numpy call."""
    best, start = (-1, 0, 0), 0  # (span, first frame, last frame)
    for k, i in enumerate(same):
        if k == 0 or i != same[k - 1] + 1:
            start = i
        if k + 1 == len(same) or same[k + 1] != i + 1:  # the run's last: frames start .. i + 1
            span = int(ts[i + 1]) - int(ts[start])
            if span > best[0]:
                best = (span, start, i + 1)
    if best[0] < 0:
        return []
    return [Finding("frozen", name, best[0] / 1e9, int(ts[best[1]]), int(ts[best[2]]))]


def spans(streams: Mapping[str, np.ndarray]) -> list[Finding]:
    """Each stream's ``misaligned``: its start after the median of the other streams' starts, or
    its end before the median of their ends, whichever is more, with the stretch it misses. A
    stream of one value (a static transform, a setting) spans no time and is left out."""
    ends = {name: (int(ts[0]), int(ts[-1])) for name, ts in streams.items() if len(ts) >= 2}
    if len(ends) < 2:
        return []
    starts, stops = sorted(s for s, _ in ends.values()), sorted(e for _, e in ends.values())
    if starts[0] == starts[-1] and stops[0] == stops[-1]:  # one span for all (streams on one clock)
        return []
    out = []
    for name, (first, last) in ends.items():
        start, end = _median_without(starts, first), _median_without(stops, last)
        late, early = first - start, end - last
        if max(late, early) > 0:
            span = (start, first) if late >= early else (last, end)
            out.append(Finding("misaligned", name, max(late, early) / 1e9, *span))
    return out


def out_of_range(name: str, ts: np.ndarray, values: np.ndarray, limits: tuple[np.ndarray, np.ndarray]) -> list[Finding]:
    """The samples of an array stream with an element outside its declared ``limits`` (low,
    high: one a column), counted, from the first of them to the last."""
    low, high = limits
    flat = np.asarray(values).reshape(len(values), -1)
    with np.errstate(invalid="ignore"):  # a NaN kept (allow_nonfinite) is not outside
        outside = ((flat < low) | (flat > high)).any(axis=1)
    if not outside.any():
        return []
    at = np.flatnonzero(outside)
    return [Finding("out_of_range", name, float(len(at)), int(ts[at[0]]), int(ts[at[-1]]))]


def declared_limits(limits: Any, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(low, high)`` as ``width`` numbers each from a stream's declared limits (numbers or one a
    column, as ``ArrayStream.limits`` or a manifest's ``meta["limits"]``); None if there are none.
    Raises ValueError naming what is wrong (a store's manifest is untrusted: the doctor skips it)."""
    if limits is None:
        return None
    if not isinstance(limits, (list, tuple)) or len(limits) != 2:
        raise ValueError("limits are (low, high)")
    bounds = []
    for bound in limits:
        if isinstance(bound, (list, tuple, np.ndarray)) and len(bound) > 4096:
            raise ValueError("more than 4096 limits")
        try:
            b = np.asarray(bound, np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError):  # JSON's integers have no bound: 1e400 is one
            raise ValueError(f"limits must be numbers, not {str(bound)[:40]}") from None
        if len(b) == 1:
            b = np.repeat(b, width)
        if len(b) != width:
            raise ValueError(f"{len(b)} limits for {width} columns")
        if np.isnan(b).any():
            raise ValueError("a limit is NaN")
        bounds.append(b)
    if (bounds[0] > bounds[1]).any():
        raise ValueError("a low limit is above its high one")
    return bounds[0], bounds[1]


def _median_without(times: list[int], one: int) -> int:
    """The median of sorted ``times`` with one ``one`` left out (the others' median, for each of
    them in turn), exactly in ns: no list rebuilt a stream, no float64 rounding."""
    gone = bisect.bisect_left(times, one)
    n = len(times) - 1

    def at(j: int) -> int:  # the j-th of the others
        return times[j if j < gone else j + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) // 2


def arrays(name: str, ts: np.ndarray, values: np.ndarray, kind: str = "array") -> list[Finding]:
    """An array stream's constant elements and its worst spike; a pose stream's worst jump."""
    if kind == "pose":
        if len(values) < 2:
            return []
        steps = np.linalg.norm(np.diff(np.asarray(values, np.float64)[:, :3], axis=0), axis=1)
        z, i = _robust_peak(steps)
        return [Finding("pose_jump", name, z, int(ts[i]), int(ts[i + 1]))] if z > 0 else []
    return arrays_together([(name, ts, values)])


def arrays_together(streams: Sequence[tuple[str, np.ndarray, np.ndarray]]) -> list[Finding]:
    """``arrays`` of an episode's array streams (name, timestamps, values): those on one clock
    (RLDS's steps, a LeRobot frame's features) measured as the columns of one table."""
    return arrays_of_episodes([streams])[0]


def arrays_of_episodes(episodes: Sequence[Sequence[tuple[str, np.ndarray, np.ndarray]]]) -> list[list[Finding]]:
    """``arrays_together`` of many episodes at once, numpy called once for them all
    (``array_health``): each episode's findings as if measured alone."""
    return [[Finding(*signal) for signal in signals] for signals in array_health.measure(episodes)]


def _robust_peak(r: np.ndarray, floor: float = 0.0) -> tuple[float, int]:
    """The largest |r| over its robust scale (at least ``floor``), and where. A scale of 0 (most
    values equal) takes the mean absolute deviation instead, so one outlier among equal values
    is still finite."""
    dev = np.abs(r - np.median(r))
    scale = max(MAD_TO_STD * float(np.median(dev)), floor)
    if scale <= 0:
        scale = float(np.mean(dev))
    if scale <= 0:
        return 0.0, 0
    i = int(np.argmax(dev))
    return float(dev[i] / scale), i


def summary(findings: Sequence[Finding]) -> dict[str, Any]:
    """What a catalog row keeps: per kind the worst value (``signals``), the kinds flagged at
    ``THRESHOLDS``, and each finding of at least ``KEPT_FROM`` of its threshold with its time
    range (so other thresholds down to that, a site's own, flag from what is kept: ``flagged``)."""
    signals: dict[str, float] = {}
    for f in findings:
        signals[f.kind] = max(signals.get(f.kind, 0.0), round(float(f.value), 6))
    kept = [f for f in findings if f.value >= KEPT_FROM * THRESHOLDS[f.kind]]  # a catalog row stays small
    return {"signals": signals, "flags": sorted({f.kind for f in findings if f.flagged}),
            "findings": [f.as_dict() for f in kept]}


def kept(doc: Any) -> list[dict[str, Any]]:
    """The findings of a catalog row's parsed ``health`` (untrusted: a store hands it over), each
    as ``summary`` writes them; anything else in it is left out."""
    found = doc.get("findings") if isinstance(doc, dict) else None
    return [f for f in found if isinstance(f, dict) and isinstance(f.get("kind"), str)
            and isinstance(f.get("stream"), str) and type(f.get("value")) in (int, float)
            and type(f.get("start_ns")) is int and type(f.get("end_ns")) is int] if isinstance(found, list) else []


def flagged(finding: Mapping[str, Any], thresholds: Mapping[str, float] = THRESHOLDS) -> bool:
    """Whether a kept finding (``summary``'s) crosses its threshold (a kind no threshold names: yes)."""
    kind, value = finding.get("kind"), finding.get("value")
    limit = thresholds.get(str(kind), THRESHOLDS.get(str(kind)))
    return limit is None or (isinstance(value, (int, float)) and value >= limit)
