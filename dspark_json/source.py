"""The ``dspark-json`` Spark data source: options and schema on the driver, work on executors.

Thin on purpose: options live in :mod:`dspark_json.options`, the offset model in
:mod:`dspark_json.inputs.listing`, the per-partition work in :mod:`dspark_json.pipeline`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import Position, PromptListing, PromptPartition, plan_partitions
from dspark_json.inputs.prompts import infer_passthrough
from dspark_json.load import prepare, resolve_schema
from dspark_json.options import Options, Query
from dspark_json.parse.convert import check_supported
from dspark_json.pipeline import read_partition

__all__ = ["DSparkJsonDataSource"]

logger = logging.getLogger("dspark_json")


_CACHE_SIZE = 16
_cache: OrderedDict[tuple[tuple[str, str], ...], Query] = OrderedDict()
_cache_lock = threading.Lock()


def _prepared(raw: Mapping[str, str], options: Options) -> Query:
    """:func:`~dspark_json.load.prepare` once per set of options in this process: Spark builds
    the source for ``schema()`` and again for the reader, often in the same Python worker."""
    key = tuple(sorted((k.lower(), v) for k, v in raw.items()))
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    query = prepare(options)
    with _cache_lock:
        _cache[key] = query
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return query


class DSparkJsonDataSource(DataSource):
    """Reads prompts, asks a vLLM / OpenAI-compatible server, yields the typed answers.

    Spark passes the ``.option(...)`` values as ``self.options``; they are parsed (and checked)
    on first use, and the server is contacted only where Spark asks for a schema or a reader.
    """

    @classmethod
    def name(cls) -> str:
        return "dspark-json"

    @property
    def parsed_options(self) -> Options:
        """The options, parsed and checked (an :class:`OptionError` names a bad one)."""
        cached: Options | None = self.__dict__.get("_parsed_options")
        if cached is None:
            cached = self.__dict__["_parsed_options"] = Options.parse(self.options)
        return cached

    @property
    def query(self) -> Query:
        """The query as the driver settles it (server checks, model, JSON Schema), once."""
        return _prepared(self.options, self.parsed_options)

    def schema(self) -> StructType:
        query = self.query
        passthrough = []
        if query.options.input.responses is None:
            passthrough = infer_passthrough(PromptListing(query.options.input.location))
        return resolve_schema(query, passthrough)

    def reader(self, schema: StructType) -> DataSourceReader:
        check_supported(schema)
        return PromptBatchReader(self.query, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_supported(schema)
        return PromptStreamReader(self.query, schema)


class PromptBatchReader(DataSourceReader):
    """``spark.read``: every prompt visible when the query is planned."""

    def __init__(self, query: Query, schema: StructType) -> None:
        self.query = query
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        inputs = self.query.options.input
        listing = PromptListing(inputs.location)
        segments = listing.segments(Position(), listing.end())
        # Spark reads one partition of its own when given none; make that one ours (empty).
        return plan_partitions(segments, inputs.partition_size) or [PromptPartition(0, ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PromptPartition)
        return read_partition(partition, self.query, self.schema)


class PromptStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets are (file, row) positions in the prompt directory."""

    def __init__(self, query: Query, schema: StructType) -> None:
        self.query = query
        self.inputs = query.options.input
        self.schema = schema
        self._listing = PromptListing(self.inputs.location)
        self._cap: Position | None = None
        journal = self.inputs.journal
        self._journal = Journal(journal) if journal is not None else None
        if self._journal is None and self.inputs.responses is None:
            logger.warning(
                "Streaming without option 'journal': a micro-batch that Spark replays after a "
                "crash, or a task it retries, sends its prompts to the model again (new answers, "
                "tokens paid twice). Set option 'journal' to a directory to read them back instead."
            )

    def initialOffset(self) -> dict[str, object]:
        return Position().to_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.inputs.max_records_per_trigger is not None:
            return ReadMaxRows(self.inputs.max_records_per_trigger)
        if self.inputs.max_files_per_trigger is not None:
            return ReadMaxFiles(self.inputs.max_files_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, object]:
        max_rows = max_files = None
        if not isinstance(limit, ReadAllAvailable):
            max_rows = self.inputs.max_records_per_trigger
            max_files = self.inputs.max_files_per_trigger
            if isinstance(limit, ReadMaxRows):
                max_rows = min(limit.max_rows, max_rows or limit.max_rows)
            if isinstance(limit, ReadMaxFiles):
                max_files = min(limit.max_files, max_files or limit.max_files)
        end = self._listing.advance(
            Position.from_offset(start), max_rows=max_rows, max_files=max_files, cap=self._cap
        )
        return end.to_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = self._listing.end()

    def reportLatestOffset(self) -> dict[str, object] | None:
        return self._listing.end().to_offset()

    def partitions(
        self, start: dict[str, object], end: dict[str, object]
    ) -> Sequence[InputPartition]:
        segments = self._listing.segments(Position.from_offset(start), Position.from_offset(end))
        batch = json.dumps(end, sort_keys=True)
        return [
            replace(p, batch=batch) for p in plan_partitions(segments, self.inputs.partition_size)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PromptPartition)
        return read_partition(partition, self.query, self.schema)

    def commit(self, end: dict[str, object]) -> None:
        """The sink has committed up to ``end``: the journal's entries before it can go. Spark
        calls this late (and not for the last batch before a shutdown); nothing relies on it."""
        if self._journal is not None:
            self._journal.prune(Position.from_offset(end))
