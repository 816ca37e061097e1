"""JSON a source hands over (a schema, an info file, an index), parsed within bounds: its size is
bounded where it is read (``SourceFiles.read_text``), its nesting here, and anything else wrong
with it is one error naming the file."""

from __future__ import annotations

import json
from typing import Any

from rayform.errors import InvalidInput

MAX_DEPTH = 64  # TFDS's deepest schemas nest about 12; LeRobot's info.json 4


def source_json(text: str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` parsed; InvalidInput if it is not JSON or nests deeper than ``max_depth``."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise InvalidInput(f"{what}: JSON nested deeper than {max_depth} levels") from None
    except ValueError as e:
        raise InvalidInput(f"{what}: not JSON ({str(e)[:120]})") from None
    level, layer = 1, [doc]
    while layer:  # breadth first: no recursion, whatever the depth
        layer = [v for node in layer if isinstance(node, (dict, list))
                 for v in (node.values() if isinstance(node, dict) else node) if isinstance(v, (dict, list))]
        if layer:
            level += 1
            if level > max_depth:
                raise InvalidInput(f"{what}: JSON nested deeper than {max_depth} levels")
    return doc
