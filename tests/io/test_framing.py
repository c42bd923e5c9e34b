"""Cutting CSV and JSON-lines streams into whole records: the cuts are where pyarrow's own parser
ends rows, at any block size, and a record over its limit is one record, never the rest."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_settings import fresh_examples

from beam_dp.io.framing import OVERSIZE, csv_header, csv_row_runs, jsonl_lines

# bytes that change pyarrow's CSV parse: delimiters, quotes, both line breaks, text
CSV_BYTES = st.binary(max_size=80).map(lambda raw: bytes(b'ab,"\n\r'[x % 6] for x in raw))


def _parse(data: bytes, names: list[str] | None = None) -> Any:
    """pyarrow's parse of ``data`` (every column as text): (names, rows, ragged rows skipped),
    or "error"."""
    skipped = [0]

    def skip(row: Any) -> str:
        skipped[0] += 1
        return "skip"

    def read(types: dict[str, Any] | None) -> pa.Table:
        return pa_csv.read_csv(
            pa.BufferReader(data),
            read_options=pa_csv.ReadOptions(
                column_names=names, use_threads=False, block_size=len(data) + 1
            ),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True, invalid_row_handler=skip),
            convert_options=pa_csv.ConvertOptions(column_types=types or {}),
        )

    try:
        found = names or read(None).schema.names
        skipped[0] = 0
        table = read(dict.fromkeys(found, pa.string()))
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        return "error"
    return table.schema.names, [tuple(row.values()) for row in table.to_pylist()], skipped[0]


def _parse_framed(data: bytes, block: int, limit: int = 1 << 20) -> Any:
    """The same parse, but of the header and of each run the framing cuts, one at a time."""
    stream = io.BytesIO(data)
    header = csv_header(stream.read, block, limit)
    if header.row is None:
        return "error"
    parsed = _parse(header.row)
    if parsed == "error":
        return parsed
    names, rows, skipped = parsed[0], [], 0
    for run in csv_row_runs(stream.read, block, limit, header.rest):
        assert run is not OVERSIZE
        part = _parse(run, names)
        if part == "error":
            return part
        rows += part[1]
        skipped += part[2]
    return names, rows, skipped


@fresh_examples(400)
@given(data=CSV_BYTES, block=st.integers(1, 9))
def test_csv_runs_parse_as_the_whole_file_does(data: bytes, block: int) -> None:
    assert _parse_framed(data, block) == _parse(data)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64])
def test_csv_runs_on_quoting_corner_cases(block: int) -> None:
    cases = [
        b'a,b\n1,"x\ny"\n2,"say ""hi""\r\nthere"\n3,z\n',  # line breaks and quotes in values
        b'a,b\n1,x"y\n2,"p"q"r\n3,z',  # quotes that do not open a field are literal
        b'a,b\r\n"1","""\n"""\r\n2,""\r3,"\n,\n"\n',  # runs of quotes of both parities
        b'\n\r\n"a\nb",c\n1,2\n',  # empty lines before a header that holds a line break
        b'a,b\n1,"never closed\n2,3\n',  # an open quote runs to the end of the file
    ]
    for data in cases:
        assert _parse_framed(data, block) == _parse(data), data


def test_csv_run_boundaries_are_row_boundaries() -> None:
    data = b"h\n" + b"".join(b'"r%d\n%s"\n' % (i, b"x" * (i % 7)) for i in range(200))
    stream = io.BytesIO(data)
    header = csv_header(stream.read, 16, 1 << 10)
    runs = list(csv_row_runs(stream.read, 16, 1 << 10, header.rest))
    assert b"".join(runs) == data[2:]  # nothing lost, nothing repeated
    assert all(isinstance(run, bytes) and run.endswith(b'"\n') for run in runs)


@fresh_examples(200)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    quoted=st.booleans(),
    block=st.integers(1, 12),
    limit=st.integers(12, 30),
)
def test_a_csv_row_over_the_limit_is_one_record(
    lengths: list[int], quoted: bool, block: int, limit: int
) -> None:
    # row i is "<i>,<value>\n" with a value of lengths[i] bytes (quoted ones hold line breaks)
    def row(i: int, length: int) -> bytes:
        value = (b"x\n" * length)[:length]
        return b'%d,"%s"\n' % (i, value) if quoted else b"%d,%s\n" % (i, b"y" * length)

    rows = [row(i, length) for i, length in enumerate(lengths)]
    stream = io.BytesIO(b"".join(rows))
    items = list(csv_row_runs(stream.read, min(block, limit), limit))
    # in order: each row within the limit, and OVERSIZE in the place of each row over it
    expected = [r if len(r) <= limit else OVERSIZE for r in rows]
    assert _join_adjacent(items) == _join_adjacent(expected)


def _join_adjacent(items: list[Any]) -> list[Any]:
    """Adjacent runs of bytes joined into one (a run may hold several rows)."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += item
        else:
            out.append(item)
    return out


def test_a_csv_header_over_its_limit_is_refused_and_one_within_is_read() -> None:
    header = b",".join(b"c%d" % i for i in range(4000)) + b"\n"  # about 24 KiB
    data = header + b"1" + b",1" * 3999 + b"\n"
    within = csv_header(io.BytesIO(data).read, 1000, len(header))
    assert (within.row, within.over_limit) == (header, False)
    over = csv_header(io.BytesIO(data).read, 1000, len(header) - 1)
    assert (over.row, over.over_limit) == (None, True)
    assert csv_header(io.BytesIO(b"").read, 10, 10).row is None
    assert csv_header(io.BytesIO(b"\n\r\n").read, 10, 10).row is None


@fresh_examples(200)
@given(
    lengths=st.lists(st.integers(0, 30), max_size=30),
    block=st.integers(1, 12),
    limit=st.integers(12, 25),
    last_newline=st.booleans(),
)
def test_jsonl_lines_keep_every_line_and_mark_each_long_one(
    lengths: list[int], block: int, limit: int, last_newline: bool
) -> None:
    lines = [b"z" * length + b"\n" for length in lengths]
    if lines and not last_newline:
        lines[-1] = lines[-1][:-1]
    stream = io.BytesIO(b"".join(lines))
    got = list(jsonl_lines(stream.read, min(block, limit), limit))
    expected = [line if len(line) <= limit else OVERSIZE for line in lines if line]
    assert got == expected


def test_block_size_over_the_limit_is_refused() -> None:
    # a row within one block must be within the limit: only rows across blocks are counted
    with pytest.raises(ValueError, match="'block_bytes' must be > 0 and <= the limit"):
        list(csv_row_runs(io.BytesIO(b"a\n").read, 10, 5))
    with pytest.raises(ValueError, match="'block_bytes' must be > 0 and <= the limit"):
        list(jsonl_lines(io.BytesIO(b"a\n").read, 10, 5))
