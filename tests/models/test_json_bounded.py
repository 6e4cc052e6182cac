"""decode_json_bounded: the one JSON decoder for everything read from Kafka."""

from __future__ import annotations

import pytest

from models.ops import SpecError
from models.workload import decode_json_bounded


def test_shallow_json_with_many_brackets_inside_strings_is_accepted() -> None:
    raw = b'{"id": "' + b"[{" * 40 + b'", "shape": [[1, 2], [3, 4]]}'
    assert decode_json_bounded(raw, 10_000, 4)["shape"] == [[1, 2], [3, 4]]


@pytest.mark.parametrize("depth", [5, 100, 100_000])
def test_nesting_deeper_than_the_limit_is_refused(depth: int) -> None:
    raw = b"[" * depth + b"]" * depth
    with pytest.raises(SpecError, match="nests"):
        decode_json_bounded(raw, 1_000_000, 4)


def test_nesting_at_the_limit_is_accepted() -> None:
    assert decode_json_bounded(b"[[[[1]]]]", 100, 4) == [[[[1]]]]


@pytest.mark.parametrize("raw", [b'{"a": NaN}', b"[Infinity]", b"{'a': 1}", b'{"a": 1',
                                 b"\xff\xfe"])
def test_what_is_not_json_is_refused_with_a_reason(raw: bytes) -> None:
    with pytest.raises(SpecError, match="not JSON|not UTF-8"):
        decode_json_bounded(raw, 100, 8)


def test_oversize_is_refused_before_parsing() -> None:
    with pytest.raises(SpecError, match="over the limit"):
        decode_json_bounded(b" " * 101, 100, 8)
