"""The codec table (``rayform.codec.codecs``) is the one place a video codec is described:
every consumer holds exactly its codecs, its names are FFmpeg's as installed, and no module
spells a codec list or a codec's settings of its own."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from rayform.codec.codecs import VIDEO, VIDEO_CODECS

ROOT = Path(__file__).resolve().parents[2] / "rayform"


def _choices(option: str) -> list[str]:
    from rayform.cli.parser import parser

    pack = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["pack"]
    return list(next(a for a in pack._actions if option in a.option_strings).choices)


def test_every_consumer_holds_the_tables_codecs():
    from rayform.codec import video, video_encoder
    from rayform.pack import spec
    from rayform.view import episode

    table = set(VIDEO)
    assert set(video.DECODERS) == table
    assert set(video_encoder.ENCODERS) == set(video_encoder.CRF) == set(video_encoder.PRESET) == table
    assert set(episode.BROWSER_CODECS) == table
    assert ("keep", "jpeg", "png", *VIDEO_CODECS) == spec.CODECS
    assert _choices("--codec") == list(spec.CODECS)
    for name, c in VIDEO.items():
        assert video_encoder.VideoCodec(name).crf == c.crf and video_encoder.VideoCodec(name).preset == c.preset
        assert c.crf_range[0] <= c.crf <= c.crf_range[1], name


def test_the_tables_names_are_ffmpegs_as_installed():
    """Each codec's encoder is in this PyAV build, and one of its decoders: a name mistyped in
    the table would only fail when a pack or a reader first meets the codec."""
    av = pytest.importorskip("av")
    for name, c in VIDEO.items():
        assert av.codec.Codec(c.encoder, "w").name == c.encoder, name
        assert any(_decodes(av, d) for d in c.decoders), name


def _decodes(av, name: str) -> bool:
    try:
        av.codec.Codec(name, "r")
        return True
    except Exception:
        return False


def test_no_module_spells_a_codec_list_or_settings_of_its_own():
    """A second list of codecs (or a codec's encoder, CRF range or browser string) elsewhere is
    what the table replaced: adding a codec would miss it."""
    spelled = [re.escape(c.browser) for c in VIDEO.values()] + [
        r"""["']h264["'],\s*["']av1["']""", r"""["']av1["'],\s*["']hevc["']""", r"""["']h264["'],\s*["']hevc["']""",
        r"libsvtav1", r"libx265"]
    found = []
    for path in ROOT.rglob("*.py"):
        if path.name == "codecs.py" and path.parent.name == "codec":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {p}" for p in spelled if re.search(p, text)]
    assert not found, found
