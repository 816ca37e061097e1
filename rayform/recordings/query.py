"""Slices by query: ``task ~ 'pick' and duration > 10 and meta.success``, over a catalog's
columns, evaluated column by column (a million segments is one pass of a few arrays).

The language::

    expr     or-expr
    or       and ("or" and)*
    and      not ("and" not)*
    not      "not" not | compare
    compare  value [("==" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "in") value]
    value    number | 'string' | "string" | true | false | null | field | "(" expr ")"
    field    duration | start | end | task | site | name | id | version | recorded | streams
             | flags | flagged | meta.KEY[.KEY…] | health.SIGNAL | has('STREAM')

- ``duration`` is in seconds, ``start`` and ``end`` the segment's first and last timestamp
  in seconds (``start_ns``/``end_ns`` in ns), ``recorded`` when it was stored (ns);
- ``~`` is a regular-expression search (``task ~ '(?i)pick'``), ``in`` tests membership in
  a list (``'cam0/rgb' in streams``), ``has('cam0/rgb')`` that a stream is present;
- ``flags`` lists the health signals that crossed their thresholds at ingest
  (``'spike' in flags``), ``flagged`` is whether any did (``not flagged``), ``health.SIGNAL``
  each signal's value (``health.frozen > 1``: seconds; ``recordings.health``); a segment
  ingested before signals were measured has none, and is not flagged (``rayform doctor``
  measures it);
- a field alone is a test of truth (``meta.success``); a missing value (a key a segment's
  metadata lacks) compares false to anything, and is false.

A query is checked before it runs: a syntax error or an unknown field is one InvalidInput
saying where.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform.errors import InvalidInput
from rayform.untrusted import parsing

FIELDS = {"duration": "duration_s", "start": "start_ns", "end": "end_ns", "start_ns": "start_ns", "end_ns": "end_ns",
          "task": "task", "site": "site", "name": "name", "id": "id", "version": "version", "recorded": "recorded",
          "streams": "stream_names", "flags": "flags", "flagged": "flags"}
COLUMNS_READ = ("duration_s", "start_ns", "end_ns", "task", "site", "name", "id", "version", "recorded", "meta",
                "stream_names", "health", "flags")
_TOKEN = re.compile(r"""\s*(?:(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|"""
                    r"""(?P<op>==|!=|<=|>=|<|>|~|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_\-]+)*))""")
_KEYWORDS = {"and", "or", "not", "in", "true", "false", "null", "has"}


@dataclass(frozen=True)
class _Node:
    kind: str  # "or" "and" "not" "cmp" "lit" "field" "has"
    args: tuple[Any, ...]


def parse(text: str) -> _Node:
    """The query's tree, or one InvalidInput saying what is wrong where."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("where: an empty query. Example: --where \"task ~ 'pick' and duration > 10\"")
    if len(text) > 4096:
        raise InvalidInput(f"where: a query of {len(text)} characters (at most 4096)")
    tokens = _tokens(text)
    parser = _Parser(text, tokens)
    node = parser.expr()
    if parser.at < len(tokens):
        parser.fail("expected the end of the query")
    return node


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise InvalidInput(f"where {text!r}: cannot read {text[at:].strip()[:20]!r} at character {at}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        out.append((kind, value, m.start(kind)))
        at = m.end()
    return out


class _Parser:
    def __init__(self, text: str, tokens: list[tuple[str, str, int]]):
        self.text, self.tokens, self.at = text, tokens, 0

    def fail(self, what: str) -> None:
        where = self.tokens[self.at][2] if self.at < len(self.tokens) else len(self.text)
        raise InvalidInput(f"where {self.text!r}: {what} at character {where}")

    def peek(self) -> tuple[str, str]:
        return (self.tokens[self.at][0], self.tokens[self.at][1]) if self.at < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.at += 1
        return token

    def word(self, *words: str) -> bool:
        kind, value = self.peek()
        if kind == "word" and value in words:
            self.at += 1
            return True
        return False

    def expr(self) -> _Node:
        node = self.conjunction()
        while self.word("or"):
            node = _Node("or", (node, self.conjunction()))
        return node

    def conjunction(self) -> _Node:
        node = self.negation()
        while self.word("and"):
            node = _Node("and", (node, self.negation()))
        return node

    def negation(self) -> _Node:
        if self.word("not"):
            return _Node("not", (self.negation(),))
        return self.comparison()

    def comparison(self) -> _Node:
        left = self.value()
        kind, op = self.peek()
        if kind == "op" and op in ("==", "!=", "<", "<=", ">", ">=", "~"):
            self.take()
            return _Node("cmp", (op, left, self.value()))
        if self.word("in"):
            return _Node("cmp", ("in", left, self.value()))
        return left

    def value(self) -> _Node:
        kind, value = self.take()
        if kind == "num":
            return _Node("lit", (float(value) if any(c in value for c in ".eE") else int(value),))
        if kind == "str":
            return _Node("lit", (re.sub(r"\\(.)", r"\1", value[1:-1]),))
        if kind == "op" and value == "(":
            node = self.expr()
            if self.take() != ("op", ")"):
                self.at -= 1
                self.fail("expected ')'")
            return node
        if kind == "word":
            if value in ("true", "false", "null"):
                return _Node("lit", ({"true": True, "false": False, "null": None}[value],))
            if value == "has":
                if self.take() != ("op", "("):
                    self.at -= 1
                    self.fail("expected has('stream')")
                stream = self.value()
                if stream.kind != "lit" or not isinstance(stream.args[0], str) or self.take() != ("op", ")"):
                    self.at -= 1
                    self.fail("expected has('stream')")
                return _Node("has", (stream.args[0],))
            if value in _KEYWORDS:
                self.at -= 1
                self.fail(f"expected a value, not {value!r}")
            if value.startswith(("meta.", "health.")):
                return _Node("field", (value,))
            if value not in FIELDS:
                self.at -= 1
                self.fail(f"unknown field {value!r} (fields: {', '.join(sorted(FIELDS))}, meta.KEY, health.SIGNAL, "
                          "has('stream'))")
            return _Node("field", (value,))
        self.at -= 1
        self.fail("expected a value" if kind != "end" else "the query ends where a value was expected")
        raise AssertionError("unreachable")


class Columns:
    """The columns a query reads, from a catalog table (``pyarrow.Table``), made on first use."""

    def __init__(self, table: Any):
        self.table = table
        self.rows = table.num_rows
        self._made: dict[str, np.ndarray] = {}
        self._json: dict[str, list[Any]] = {}  # a JSON column, parsed once

    def get(self, name: str) -> np.ndarray:
        found = self._made.get(name)
        if found is None:
            found = self._made[name] = self._make(name)
        return found

    def _make(self, name: str) -> np.ndarray:
        if name.startswith(("meta.", "health.")):
            top, *keys = name.split(".")
            if top not in self._json:
                with parsing(f"the catalog's {top} column"):  # a store's text: one Malformed if not JSON
                    docs = [json.loads(m) if m else {} for m in self.table.column(top).to_pylist()]
                self._json[top] = [d.get("signals", {}) if isinstance(d, dict) else {} for d in docs] \
                    if top == "health" else docs
            out = np.empty(self.rows, object)
            for i, doc in enumerate(self._json[top]):
                for key in keys:
                    doc = doc.get(key) if isinstance(doc, dict) else None
                out[i] = doc
            return out
        if name == "flagged":
            return np.array([bool(f) for f in self.table.column("flags").to_pylist()], bool)
        column = FIELDS[name]
        values = self.table.column(column).to_pylist()
        if name in ("start", "end"):
            return np.array([None if v is None else v / 1e9 for v in values], object)
        return np.array(values + [None], object)[:-1]  # an object array of one value per row, lists kept


def evaluate(node: _Node, columns: Columns) -> np.ndarray:
    """A bool per row: whether it satisfies the query."""
    return _truth(_eval(node, columns), columns.rows)


def _eval(node: _Node, columns: Columns) -> Any:
    if node.kind == "lit":
        return node.args[0]
    if node.kind == "field":
        return columns.get(node.args[0])
    if node.kind == "has":
        stream = node.args[0]
        return np.array([isinstance(v, list) and stream in v for v in columns.get("streams")], bool)
    if node.kind == "not":
        return ~_truth(_eval(node.args[0], columns), columns.rows)
    if node.kind in ("and", "or"):
        a, b = (_truth(_eval(n, columns), columns.rows) for n in node.args)
        return a & b if node.kind == "and" else a | b
    op, left, right = node.args
    return _compare(op, _eval(left, columns), _eval(right, columns), columns.rows)


def _truth(value: Any, rows: int) -> np.ndarray:
    if isinstance(value, np.ndarray):
        if value.dtype == bool:
            return value
        return np.array([_truthy(v) for v in value], bool)
    return np.full(rows, _truthy(value), bool)


def _truthy(v: Any) -> bool:
    return bool(v) and not (isinstance(v, float) and math.isnan(v))


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _compare(op: str, left: Any, right: Any, rows: int) -> np.ndarray:
    a = left if isinstance(left, np.ndarray) else np.full(rows, left, object)
    b = right if isinstance(right, np.ndarray) else np.full(rows, right, object)
    if op == "~":
        if not isinstance(right, str):
            raise InvalidInput("where: '~' takes a regular expression in quotes on its right, e.g. task ~ 'pick'")
        try:
            pattern = re.compile(right)
        except re.error as e:
            raise InvalidInput(f"where: {right!r} is not a regular expression ({e})") from None
        return np.array([isinstance(x, str) and pattern.search(x) is not None for x in a], bool)
    if op == "in":
        return np.array([isinstance(y, (list, str)) and x in y if x is not None else False for x, y in zip(a, b)], bool)
    fast = _numbers(a, b)
    if fast is not None:  # numbers on both sides, none missing: one vectorized comparison
        return np.asarray(_OPS[op](*fast), bool)
    fn = _OPS[op]
    out = np.zeros(rows, bool)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        if x is None or y is None:  # missing: equal only to missing
            out[i] = bool((x is None and y is None) if op == "==" else ((x is None) != (y is None)) if op == "!=" else False)
            continue
        try:
            out[i] = bool(fn(x, y))
        except TypeError:  # a string against a number: unequal, and neither less nor more
            out[i] = op == "!="
    return out


def _numbers(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides as float arrays, where every value of both is an int or a float (not a bool,
    a string, a list or missing)."""
    for side in (a, b):
        if side.dtype == object and not np.fromiter((type(v) in (int, float) for v in side), bool, len(side)).all():
            return None
        if side.dtype.kind not in "iufO":
            return None
    return np.asarray(a, np.float64), np.asarray(b, np.float64)


class Query:
    """A ``--where`` query, parsed once (a syntax error is said here, before anything is read),
    applied to any number of catalog tables (or batches of one)."""

    def __init__(self, text: str):
        self.text = text
        self._node = parse(text)

    def mask(self, table: Any) -> np.ndarray:
        """Which rows of ``table`` the query selects."""
        return evaluate(self._node, Columns(table))

    def select(self, table: Any) -> Any:
        """The rows of ``table`` the query selects, in their order."""
        import pyarrow as pa

        return table.filter(pa.array(self.mask(table)))


def select(table: Any, query: str) -> Any:
    """The rows of a catalog table the query selects, in their order."""
    return Query(query).select(table)
