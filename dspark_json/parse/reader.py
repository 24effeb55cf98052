"""The JSON lines reader of the vectorised path where a library reads the fitting documents:
pyarrow's, in parallel chunks (the GPU backend's cuDF reader, :mod:`.gpu.reader`, is one of
these)."""

from __future__ import annotations

import logging
from functools import partial
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from dspark_json.parse.json import gather_lines, line_lengths
from dspark_json.parse.threads import on_threads

__all__ = ["JsonLines"]

logger = logging.getLogger("dspark_json")


class JsonLines:
    """Reads JSON lines with pyarrow in chunks of about ``chunk_bytes``, on ``threads`` threads.

    pyarrow stops a whole read at the first line it rejects; the scans before it make that rare,
    and when it happens only that chunk's rows are given back as failed (for the reference
    parser), never the batch.
    """

    def __init__(self, chunk_bytes: int = 4 << 20, threads: int = 2) -> None:
        self.chunk_bytes = chunk_bytes
        self.threads = threads

    def read(
        self,
        data: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        take: np.ndarray,
        schema: pa.Schema,
        *,
        prefix: bytes = b"",
        suffix: bytes = b"",
    ) -> tuple[pa.Table, np.ndarray]:
        """Parse ``prefix + data[starts[i]:ends[i]] + suffix`` for each row ``i`` where
        ``take[i]`` (a row of nulls elsewhere). Returns one table row per row, and a mask of
        the rows that were read (False for rows of a chunk pyarrow rejected; those are null)."""
        n = len(starts)
        ok = np.ones(n, np.bool_)
        if n == 0:
            return schema.empty_table(), ok
        lengths = line_lengths(starts, ends, take, len(prefix) + len(suffix))
        line_offsets = np.concatenate([[0], np.cumsum(lengths)])
        bounds = [0]
        while bounds[-1] < n:
            target = line_offsets[bounds[-1]] + self.chunk_bytes
            nxt = int(np.searchsorted(line_offsets, target, side="right")) - 1
            bounds.append(min(max(nxt, bounds[-1] + 1), n))
        spans = list(pairwise(bounds))
        head = np.frombuffer(prefix or b"\0", np.uint8)[: len(prefix)]
        tail = np.frombuffer(suffix or b"\0", np.uint8)[: len(suffix)]

        def one(span: tuple[int, int]) -> pa.Table | None:
            lo, hi = span
            chunk = np.empty(line_offsets[hi] - line_offsets[lo], np.uint8)
            gather_lines(data, starts[lo:hi], ends[lo:hi], take[lo:hi], head, tail, chunk)
            table = self.read_chunk(chunk, schema)
            return table if table is not None and table.num_rows == hi - lo else None

        tables = on_threads(self.threads, [partial(one, span) for span in spans])
        read = []
        for (lo, hi), table in zip(spans, tables, strict=True):
            if table is None:
                ok[lo:hi] = False
                nulls = [pa.nulls(hi - lo, f.type) for f in schema]
                read.append(pa.table(nulls, schema=schema))
            else:
                read.append(table.select(schema.names).cast(schema))
        return pa.concat_tables(read).combine_chunks(), ok

    def read_chunk(self, chunk: np.ndarray, schema: pa.Schema) -> pa.Table | None:
        """One chunk of JSON lines as a table of ``schema`` (unknown keys ignored), or None
        where the reader rejects it."""
        try:
            return pj.read_json(
                pa.BufferReader(pa.py_buffer(chunk)),
                read_options=pj.ReadOptions(use_threads=False, block_size=len(chunk) + 1),
                parse_options=pj.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            logger.debug("pyarrow rejected a chunk of JSON lines: %s", exc)
            return None
