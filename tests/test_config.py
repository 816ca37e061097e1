"""The RAYFORM_* settings: read when used, each bad value one InvalidInput naming the variable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rayform import config
from rayform.errors import InvalidInput


def test_settings_read_when_used_with_their_defaults():
    assert config.reader_resident({}) == 32 << 20 and config.reader_resident({"RAYFORM_READER_RESIDENT": "8MiB"}) == 8 << 20
    assert config.reader_resident({"RAYFORM_READER_RESIDENT": "0"}) == 0
    assert config.batch_slots({}) == 6 and config.batch_slots({"RAYFORM_BATCH_SLOTS": "2"}) == 2


@pytest.mark.parametrize("read, variable, value", [
    (config.reader_resident, "RAYFORM_READER_RESIDENT", "lots"),
    (config.batch_slots, "RAYFORM_BATCH_SLOTS", "six"),
    (config.batch_slots, "RAYFORM_BATCH_SLOTS", "-1"),
    (config.pack_workers, "RAYFORM_PACK_WORKERS", "0"),
])
def test_a_bad_value_is_one_error_naming_the_variable(read, variable, value):
    with pytest.raises(InvalidInput, match=variable):
        read({variable: value})


def test_a_bad_value_does_not_break_the_import():
    """Read at import, a typo crashed `import rayform.torch` with a bare ValueError."""
    code = "import rayform.torch, rayform.read.reader, rayform.torch.arena; print('ok')"
    env = {"RAYFORM_READER_RESIDENT": "lots", "RAYFORM_BATCH_SLOTS": "six", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "ok", out.stderr
