"""The metric stage's batch, column-wise: every form of a metrics value parsed into columns.

A metrics value is one execution, a version-2 list of row objects or a version-3 columnar
record (app/records.py, docs/contract.md). Each is decoded once (orjson) and checked against
``MetricRecord``'s fields: a row object by the compiled field check, a columnar record one
column at a time (the set of a column's value types against its kind: C-speed for a
well-formed column; the rows of a bad one are found and refused one by one, with the reason
the row form would give). What the window and learn stages read is kept as columns: NumPy
arrays of the numbers, and each row's (op, variant) as an index into the batch's distinct
pairs, so that features, model updates and window statistics are computed once per distinct
pair or key, not once per row.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson

from app.records import (
    METRIC_COLUMNS_VERSION,
    MetricRecord,
    check_metric_columns,
    dictionary_encode,
    metric_rows,
    row_maker,
    wire_defaults,
    wire_fields,
)
from app.streaming import check_fields, decode_object, is_kind

REQUIRED, OPTIONAL = wire_fields(MetricRecord)
DEFAULTS = {name: value for name, value in wire_defaults(MetricRecord).items() if name in OPTIONAL}
KINDS = {**REQUIRED, **OPTIONAL}  # check order: required fields first, as check_fields
# The fields the window and learn stages read, as columns (op and variant: as shape indexes).
NEEDED = ("device_id", "device_class", "status", "exec_ms", "energy_j", "batch_size",
          "batch_exec_ms", "setup_ms", "started_at_ms", "finished_at_ms", "transfer_ms",
          "transfer_bytes", "cpu_ms")
_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}), "object": frozenset({dict}), "list": frozenset({list}),
    "integer": frozenset({int}), "boolean": frozenset({bool}), "number": frozenset({int, float})}
_NONE = frozenset({type(None)})
RefusedRow = tuple[int, Any, str]  # (index in the value, the row, the reason)


class MetricRow(SimpleNamespace):
    """One checked execution from the metrics topic: a ``MetricRecord``'s fields as attributes
    (defaults filled in, unknown fields left out). Lighter than the Faust record, whose field
    descriptors cost more than the rest of the metric path per row."""


def _check_row(data: Any) -> None:
    """ValueError with the reason when a decoded row is not one execution."""
    if not isinstance(data, dict):
        raise ValueError("metric is not a JSON object")
    check_fields(data, "metric", REQUIRED, OPTIONAL)
    if not data["exec_ms"] >= 0:
        raise ValueError(f"metric exec_ms {data['exec_ms']!r} is not a non-negative number")


_metric_row = row_maker(MetricRecord, MetricRow)


def check_metric(data: Any) -> MetricRow:
    """Check one decoded execution (a row); ValueError with the reason when it is not one."""
    _check_row(data)
    return _metric_row(data)


@dataclass(slots=True)
class Block:
    """The well-formed rows of one metrics value.

    A columnar record's block holds each of `NEEDED` as a list of one value per row
    (``columns``); a row-form block holds each row's `NEEDED` values as a tuple (``tuples``:
    one-row records are this form's common case, and the batch transposes all of them at
    once). ``shapes`` are the value's distinct ``(op, variant)`` pairs as decoded,
    ``shape_keys`` their JSON text and ``shape_index`` each row's pair. ``source`` rebuilds
    good row i as its producer wrote it (for a dead letter that can be replayed alone);
    ``whole`` says the value is that one row.
    """

    rows: int
    columns: dict[str, list[Any]] | None
    tuples: list[tuple[Any, ...]] | None
    shapes: list[tuple[Any, Any]]
    shape_keys: list[bytes]
    shape_index: list[int]
    source: Any
    whole: bool
    event: Any = None
    device_class: str | None = None  # the class of every row, when one field holds it

    def row(self, i: int) -> dict[str, Any]:
        """Good row ``i`` as its producer wrote it."""
        return dict(self.source(i))


_NEEDED_OF = itemgetter(*NEEDED)


def _row_block(good: list[dict[str, Any]], source: Any, whole: bool) -> Block:
    """A block of checked row objects (plain lists and C-level getters: a one-row record is
    the common case of this form, and NumPy's per-call cost would be most of it)."""
    shapes, keys, index = dictionary_encode((row["op"], row["variant"]) for row in good)
    values = [_NEEDED_OF(row if row.keys() >= DEFAULTS.keys() else {**DEFAULTS, **row})
              for row in good]
    return Block(len(good), None, values, shapes, keys, index, source, whole)


def _refuse(bad: dict[int, str], rows: list[int], reason: str) -> None:
    for i in rows:
        bad.setdefault(i, reason)  # a row's first failing field, as the row check reports


def _column_kind_errors(name: str, kind: str, column: Any, bad: dict[int, str]) -> None:
    """Refuse the rows whose value of ``column`` is not of ``kind`` (null allowed where the
    field is optional)."""
    nullable = name in OPTIONAL
    values = column if isinstance(column, list) else column[0]
    allowed = _TYPES[kind] | (_NONE if nullable else frozenset())
    if set(map(type, values)) <= allowed:
        return  # numbers are finite: orjson refuses NaN, Infinity and doubles out of range
    for j, value in enumerate(values):
        if (value is None and nullable) or is_kind(value, kind):
            continue
        reason = f"metric {name} must be a {kind}, got {type(value).__name__}"
        rows = [j] if isinstance(column, list) else [
            i for i, at in enumerate(column[1]) if at == j]
        _refuse(bad, rows, reason)


def _columnar_block(data: dict[str, Any]) -> tuple[Block, list[RefusedRow]]:
    """A version-3 value, checked column by column."""
    count, fields, columns = check_metric_columns(data)
    missing = [name for name in REQUIRED if name not in fields and name not in columns]
    if missing:
        raise ValueError(f"metric batch lacks {', '.join(missing)}")
    for name, kind in KINDS.items():
        value = fields.get(name)
        if name in fields and not ((value is None and name in OPTIONAL) or is_kind(value, kind)):
            raise ValueError(f"metric {name} must be a {kind}, got {type(value).__name__} "
                             "(in every row of the batch)")
    if "exec_ms" in fields and not fields["exec_ms"] >= 0:
        raise ValueError(f"metric exec_ms {fields['exec_ms']!r} is not a non-negative number "
                         "(in every row of the batch)")
    bad: dict[int, str] = {}
    for name, kind in KINDS.items():
        if name in columns:
            _column_kind_errors(name, kind, columns[name], bad)
    if "exec_ms" in columns:
        exec_ms = columns["exec_ms"]
        values, at = (exec_ms, None) if isinstance(exec_ms, list) else exec_ms
        if set(map(type, values)) <= _TYPES["number"]:
            negative = [] if min(values, default=0) >= 0 else [
                j for j, v in enumerate(values) if v < 0]
        else:
            negative = [j for j, v in enumerate(values) if is_kind(v, "number") and not v >= 0]
        for j in negative:
            reason = f"metric exec_ms {values[j]!r} is not a non-negative number"
            _refuse(bad, [j] if at is None else [i for i, k in enumerate(at) if k == j], reason)

    def full_row(i: int) -> dict[str, Any]:
        row = dict(fields)
        for name, column in columns.items():
            row[name] = column[i] if isinstance(column, list) else column[0][column[1][i]]
        return row

    refused = [(i, full_row(i), f"metric {i} of a batch of {count}: {bad[i]}")
               for i in sorted(bad)]
    keep = [i for i in range(count) if i not in bad] if bad else None
    rows = count if keep is None else len(keep)

    def column(name: str) -> list[Any]:
        if name in fields:
            return [fields[name]] * rows
        if name not in columns:
            return [DEFAULTS[name]] * rows
        raw = columns[name]
        values = raw if isinstance(raw, list) else [raw[0][k] for k in raw[1]]
        return values if keep is None else [values[i] for i in keep]

    def codes(name: str) -> tuple[list[Any], np.ndarray]:
        """Distinct values of op or variant and each row's index among them."""
        if name in fields:
            return [fields[name]], np.zeros(count, dtype=np.intp)
        raw = columns[name]
        if isinstance(raw, tuple):
            return raw[0], np.asarray(raw[1], dtype=np.intp)
        where: dict[bytes, int] = {}
        distinct: list[Any] = []
        index = np.empty(count, dtype=np.intp)
        for i, value in enumerate(raw):
            key = orjson.dumps(value)
            at = where.get(key)
            if at is None:
                at = where[key] = len(distinct)
                distinct.append(value)
            index[i] = at
        return distinct, index

    op_column = columns.get("op")
    if "variant" in fields and isinstance(op_column, tuple):
        # What executors write: one variant, ops dictionary-encoded. The dictionary's values
        # that kept rows use are the block's shapes (a repeated one is merged by its JSON key
        # with the batch's others).
        variant = fields["variant"]
        index_list = op_column[1] if keep is None else [op_column[1][i] for i in keep]
        used = sorted(set(index_list))
        if len(used) != len(op_column[0]):  # only values a kept row uses (others unchecked)
            rank = {at: k for k, at in enumerate(used)}
            index_list = [rank[at] for at in index_list]
        shapes = [(op_column[0][at], variant) for at in used]
        source = full_row if keep is None else (lambda i: full_row(keep[i]))
        return Block(rows, {name: column(name) for name in NEEDED}, None, shapes,
                     [orjson.dumps(shape) for shape in shapes], index_list, source,
                     False, device_class=fields.get("device_class")), refused
    ops, op_index = codes("op")
    variants, variant_index = codes("variant")
    pair = op_index * len(variants) + variant_index
    if keep is not None:
        pair = pair[np.asarray(keep, dtype=np.intp)]
    # The distinct pairs (in code order) and each row's rank among them: a bincount-sized
    # mask rather than a sort, the pair codes being small.
    present = np.zeros(len(ops) * len(variants), dtype=bool)
    present[pair] = True
    unique = np.flatnonzero(present)
    index = (np.cumsum(present) - 1)[pair]
    shapes = [(ops[int(p) // len(variants)], variants[int(p) % len(variants)]) for p in unique]
    keys = [orjson.dumps(shape) for shape in shapes]
    source = full_row if keep is None else (lambda i: full_row(keep[i]))
    block = Block(rows, {name: column(name) for name in NEEDED}, None, shapes, keys,
                  index.tolist(), source, False, device_class=fields.get("device_class"))
    return block, refused


def parse_block(raw: bytes) -> tuple[Block, list[RefusedRow]]:
    """A metrics value's well-formed executions as a block, and ``(index, row, reason)`` for
    each row refused. ValueError when the value as a whole is not a metric or a metric batch
    (a columnar record whose structure, or a field shared by every row, is wrong)."""
    data = decode_object(raw, "metric")
    if data.get("version") == METRIC_COLUMNS_VERSION:
        return _columnar_block(data)
    if "version" not in data:  # one execution: the common case of the row form
        try:
            _check_row(data)
        except ValueError as exc:
            return Block(0, None, [], [], [], [], None, True), [(0, data, str(exc))]
        pair = (data["op"], data["variant"])
        return Block(1, None, [_NEEDED_OF(data if data.keys() >= DEFAULTS.keys()
                                          else {**DEFAULTS, **data})],
                     [pair], [orjson.dumps(pair)], [0], lambda _: data, True,
                     device_class=data["device_class"]), []
    rows = metric_rows(data)
    good: list[dict[str, Any]] = []
    positions: list[int] = []
    refused: list[RefusedRow] = []
    for index, row in enumerate(rows):
        try:
            _check_row(row)
            good.append(row)
            positions.append(index)
        except ValueError as exc:
            refused.append((index, row, str(exc) if len(rows) == 1
                            else f"metric {index} of a batch of {len(rows)}: {exc}"))
    return _row_block(good, lambda i: rows[positions[i]], len(rows) == 1), refused


def block_metrics(block: Block) -> list[MetricRow]:
    """A block's rows as checked row objects (what `check_metric` gives for each)."""
    return [check_metric(block.row(i)) for i in range(block.rows)]


@dataclass
class MetricBatch:
    """The good rows of a batch of metrics values, column-wise, in the order they came.

    ``block_of`` gives each row's block (its event: ``blocks[b].event``); ``classes`` the
    batch's device classes and ``class_code`` each row's; ``shapes`` the batch's distinct
    ``(op, variant)`` pairs as decoded (``shape_keys``: their JSON text) and ``shape`` each
    row's. Absent numbers (energy, the call time of a batched row, setup, CPU time) are NaN.
    """

    blocks: list[Block]
    block_of: np.ndarray
    block_row: np.ndarray
    classes: list[str]
    class_code: np.ndarray
    ok: np.ndarray
    exec_ms: np.ndarray
    energy_j: np.ndarray
    batch_size: list[Any]
    batch_exec_ms: list[Any]
    setup_ms: np.ndarray
    cpu_ms: np.ndarray
    shapes: list[tuple[Any, Any]]
    shape_keys: list[bytes]
    shape: np.ndarray
    columns: dict[str, list[Any]]

    @property
    def rows(self) -> int:
        return int(self.ok.size)

    def event(self, i: int) -> Any:
        """The event that carried row ``i``."""
        return self.blocks[int(self.block_of[i])].event

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as its producer wrote it."""
        return self.blocks[int(self.block_of[i])].row(int(self.block_row[i]))

    def whole(self, i: int) -> bool:
        """Whether row ``i`` is its event's whole value."""
        return self.blocks[int(self.block_of[i])].whole

    def column(self, name: str) -> list[Any]:
        """Column ``name`` (one of `NEEDED`) over the whole batch."""
        return self.columns[name]

    @classmethod
    def from_blocks(cls, blocks: list[Block]) -> MetricBatch:
        blocks = [b for b in blocks if b.rows]
        sizes = np.fromiter((b.rows for b in blocks), dtype=np.intp, count=len(blocks))
        block_of = np.repeat(np.arange(len(blocks), dtype=np.intp), sizes)
        starts = np.cumsum(sizes) - sizes
        block_row = np.arange(int(sizes.sum()), dtype=np.intp) - np.repeat(starts, sizes)
        where: dict[bytes, int] = {}
        shapes: list[tuple[Any, Any]] = []
        shape: list[int] = []
        parts: dict[str, list[Any]] = {name: [] for name in NEEDED}
        pending: list[tuple[Any, ...]] = []  # row tuples of consecutive row-form blocks

        def transpose() -> None:
            if pending:
                for name, column in zip(NEEDED, zip(*pending, strict=True), strict=True):
                    parts[name].append(column)
                pending.clear()

        for block in blocks:  # plain lists: a block is often one row
            remap = []
            for key, pair in zip(block.shape_keys, block.shapes, strict=True):
                at = where.get(key)
                if at is None:
                    at = where[key] = len(shapes)
                    shapes.append(pair)
                remap.append(at)
            shape.extend([remap[0]] * block.rows if len(remap) == 1
                         else [remap[k] for k in block.shape_index])
            if block.tuples is not None:
                pending.extend(block.tuples)
            else:
                assert block.columns is not None
                transpose()
                for name in NEEDED:
                    parts[name].append(block.columns[name])
        transpose()
        columns = {name: list(itertools.chain.from_iterable(chunks))
                   for name, chunks in parts.items()}
        class_names: dict[str, int] = {}
        if all(block.device_class is not None for block in blocks):  # one class a record
            class_code = list(itertools.chain.from_iterable(
                [class_names.setdefault(str(block.device_class), len(class_names))] * block.rows
                for block in blocks))
        else:
            class_code = [class_names.setdefault(c, len(class_names))
                          for c in columns["device_class"]]

        def chain(name: str) -> list[Any]:
            return columns[name]

        status = chain("status")
        return cls(
            blocks=blocks, block_of=block_of, block_row=block_row, classes=list(class_names),
            class_code=np.array(class_code, dtype=np.intp),
            ok=np.fromiter(map("ok".__eq__, status), dtype=bool, count=len(status)),
            exec_ms=np.asarray(chain("exec_ms"), dtype=np.float64),
            energy_j=np.asarray(chain("energy_j"), dtype=np.float64),
            batch_size=chain("batch_size"), batch_exec_ms=chain("batch_exec_ms"),
            setup_ms=np.asarray(chain("setup_ms"), dtype=np.float64),
            cpu_ms=np.asarray(chain("cpu_ms"), dtype=np.float64),
            shapes=shapes, shape_keys=list(where), shape=np.array(shape, dtype=np.intp),
            columns=columns)
