"""What the CLI writes to a terminal: every control character escaped.

Names, tasks and metadata come from stores and sources, which are untrusted: a segment named
``\\x1b]0;PWNED\\x07\\x1b[2J`` would set the terminal's title and clear it when listed, and a
carriage return or a right-to-left override would hide what is printed before it. The CLI's
standard output goes through ``SafeText``, so no command has to remember; its error line
through ``safe``. Line feeds and tabs stay (the CLI's own layout); JSON escapes its own.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

# C0 but tab and line feed, DEL, C1, and Unicode's bidirectional overrides and isolates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x7f else f"\\u{code:04x}"  # \u: still valid inside JSON


def safe(text: str) -> str:
    """``text`` with each control character written as its escape (``\\x1b``, ``\\u202e``)."""
    return _CONTROL.sub(_escaped, text) if _CONTROL.search(text) else text


class SafeText:
    """A text stream (the CLI's stdout) that writes ``safe`` text to the one it wraps."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(safe(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self.stream, name)
