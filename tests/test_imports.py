"""`import rayform` stays light: no torch, no converter library, no webdataset (it imports torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ["torch", "webdataset", "av", "h5py", "pyarrow", "rosbags", "mcap", "s3fs"]


def test_import_rayform_imports_no_optional_library():
    code = ("import sys, rayform, rayform.converters.ingest, rayform.converters.lerobot, rayform.converters.hdf5; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_rayform_torch_is_there_after_a_bare_import():
    code = "import rayform; print(rayform.torch.EpisodeDataset.__name__, rayform.torch.StreamingEpisodeDataset.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["EpisodeDataset", "StreamingEpisodeDataset"]


def test_import_rayform_loads_each_name_on_first_use():
    """A bare import loads nothing heavy (the command answers Ctrl-C from its first instant);
    each public name still resolves, by attribute and by ``from rayform import``."""
    code = ("import sys, rayform; before = 'numpy' in sys.modules; from rayform import Client, SliceNotFound; "
            "print(before, rayform.Client is Client, issubclass(SliceNotFound, KeyError), "
            "'Client' in dir(rayform), sorted(rayform.__all__) == sorted(set(rayform.__all__)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "True", "True", "True"]
    missing = subprocess.run([sys.executable, "-c", "import rayform; rayform.Clinet"], capture_output=True, text=True)
    assert "has no attribute 'Clinet'" in missing.stderr


def test_import_rayform_works_from_the_folder_above_a_clone_named_rayform(tmp_path):
    """There the clone's folder (no __init__.py at its root) must not pass for the package: the
    editable install is a plain path entry, which a regular package on it wins over."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "rayform").symlink_to(root, target_is_directory=True)
    code = "import rayform, rayform.converters.demo; print(rayform.Client.__name__, rayform.__file__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    name, where = out.stdout.split()
    assert name == "Client" and Path(where).resolve() == root / "rayform" / "__init__.py"
