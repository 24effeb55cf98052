"""The ``dspark-json`` Spark data source: options and schema on the driver, work on executors.

Thin on purpose: options live in :mod:`dspark_json.options`, the offset model in
:mod:`dspark_json.inputs`, the per-partition work in :mod:`dspark_json.pipeline`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, MutableMapping, Sequence
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

from dspark_json.inputs import (
    Position,
    PromptListing,
    PromptPartition,
    infer_passthrough,
    plan_partitions,
)
from dspark_json.journal import Journal
from dspark_json.options import Options
from dspark_json.parse.convert import check_supported
from dspark_json.pipeline import read_partition
from dspark_json.resolve import prepare, resolve_schema

__all__ = ["DSparkJsonDataSource"]

logger = logging.getLogger("dspark_json")


class DSparkJsonDataSource(DataSource):
    """Reads prompts, asks a vLLM / OpenAI-compatible server, yields the typed answers."""

    @classmethod
    def name(cls) -> str:
        return "dspark-json"

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.config = prepare(Options.parse(options))

    def schema(self) -> StructType:
        passthrough = []
        if self.config.responses is None:
            passthrough = infer_passthrough(PromptListing(self.config.prompts))
        return resolve_schema(self.config, passthrough)

    def reader(self, schema: StructType) -> DataSourceReader:
        check_supported(schema)
        return PromptBatchReader(self.config, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_supported(schema)
        return PromptStreamReader(self.config, schema)


class PromptBatchReader(DataSourceReader):
    """``spark.read``: every prompt visible when the query is planned."""

    def __init__(self, config: Options, schema: StructType) -> None:
        self.config = config
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        listing = PromptListing(self.config.input_directory)
        segments = listing.segments(Position(), listing.end())
        # Spark reads one partition of its own when given none; make that one ours (empty).
        return plan_partitions(segments, self.config.partition_size) or [PromptPartition(0, ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PromptPartition)
        return read_partition(partition, self.config, self.schema)


class PromptStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets are (file, row) positions in the prompt directory."""

    def __init__(self, config: Options, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        self._listing = PromptListing(config.input_directory)
        self._cap: Position | None = None
        self._journal = Journal(config.journal) if config.journal is not None else None
        if self._journal is None and config.responses is None:
            logger.warning(
                "Streaming without option 'journal': a micro-batch that Spark replays after a "
                "crash, or a task it retries, sends its prompts to the model again (new answers, "
                "tokens paid twice). Set option 'journal' to a directory to read them back instead."
            )

    def initialOffset(self) -> dict[str, object]:
        return Position().to_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_records_per_trigger is not None:
            return ReadMaxRows(self.config.max_records_per_trigger)
        if self.config.max_files_per_trigger is not None:
            return ReadMaxFiles(self.config.max_files_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, object]:
        max_rows = max_files = None
        if not isinstance(limit, ReadAllAvailable):
            max_rows = self.config.max_records_per_trigger
            max_files = self.config.max_files_per_trigger
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
            replace(p, batch=batch) for p in plan_partitions(segments, self.config.partition_size)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PromptPartition)
        return read_partition(partition, self.config, self.schema)

    def commit(self, end: dict[str, object]) -> None:
        """The sink has committed up to ``end``: the journal's entries before it can go. Spark
        calls this late (and not for the last batch before a shutdown); nothing relies on it."""
        if self._journal is not None:
            self._journal.prune(Position.from_offset(end))
