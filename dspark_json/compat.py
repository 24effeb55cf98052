"""What differs between the Spark versions dspark-json runs on (4.0 up to 5), in one place.

=============  ==========================================  =====================================
               Spark 4.0 and 4.1                           Spark 4.2 and later
=============  ==========================================  =====================================
Arrow schemas  ``to_arrow_schema(timestamp_utc=True)``     ``to_arrow_schema(timezone="UTC")``
read limits    ``latestOffset()`` gets no start and no     ``latestOffset(start, limit)``, with
               limit: the reader keeps its start and caps  the limit ``getDefaultReadLimit()``
               the range with its own options              gave (:func:`read_caps`)
availableNow   Spark gives a Python source one             ``prepareForTriggerAvailableNow()``;
               micro-batch per availableNow run (its       Spark runs micro-batches up to the
               fallback to Trigger.Once): :func:`start`    end seen at start, then stops
               repeats runs until one finds nothing new
=============  ==========================================  =====================================

Which column applies is found by looking for the API, not by comparing version numbers.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema as _to_arrow_schema
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = [
    "ADMISSION_CONTROL",
    "AvailableNowRuns",
    "AvailableNowTrigger",
    "default_read_limit",
    "read_caps",
    "start",
    "to_arrow_schema",
]

logger = logging.getLogger("dspark_json")

#: Spark passes read limits to a Python stream reader (``latestOffset(start, limit)``,
#: ``getDefaultReadLimit``) and runs Trigger.AvailableNow for it (4.2 and later).
ADMISSION_CONTROL = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None

#: How ``to_arrow_schema`` is told to make TIMESTAMP a UTC instant (4.2 renamed the keyword).
_ARROW_TIMESTAMPS: dict[str, Any] = (
    {"timezone": "UTC"}
    if "timezone" in inspect.signature(_to_arrow_schema).parameters
    else {"timestamp_utc": True}
)


def to_arrow_schema(schema: StructType) -> pa.Schema:
    """Spark's Arrow schema for ``schema``, with timestamps in UTC (what the JVM reads back)."""
    return _to_arrow_schema(schema, **_ARROW_TIMESTAMPS)


if TYPE_CHECKING or ADMISSION_CONTROL:
    from pyspark.sql.streaming.datasource import (
        SupportsTriggerAvailableNow as AvailableNowTrigger,
    )
else:

    class AvailableNowTrigger:
        """Spark 4.0 and 4.1 have no such interface; :func:`start` runs availableNow instead."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Never called before Spark 4.2."""


def default_read_limit(max_rows: int | None, max_files: int | None) -> ReadLimit:
    """The read limit Spark (4.2 and later) passes to each ``latestOffset`` by default."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

    if max_rows is not None:
        return ReadMaxRows(max_rows)
    if max_files is not None:
        return ReadMaxFiles(max_files)
    return ReadAllAvailable()


def read_caps(
    limit: ReadLimit | None, *, max_rows: int | None, max_files: int | None
) -> tuple[int | None, int | None]:
    """The (rows, files) caps of one micro-batch, from the options' caps and Spark's ``limit``.

    ``limit`` is ``None`` where Spark passes none (4.0, 4.1): the options' caps hold. From 4.2,
    ``ReadAllAvailable`` (e.g. Trigger.Once) lifts them and a narrower limit narrows them.
    """
    if limit is None:
        return max_rows, max_files
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

    if isinstance(limit, ReadAllAvailable):
        return None, None
    if isinstance(limit, ReadMaxRows):
        max_rows = min(limit.max_rows, max_rows or limit.max_rows)
    if isinstance(limit, ReadMaxFiles):
        max_files = min(limit.max_files, max_files or limit.max_files)
    return max_rows, max_files


def start(
    writer: DataStreamWriter, trigger: Mapping[str, Any] | None = None, *, path: str | None = None
) -> StreamingQuery:
    """``writer.trigger(**trigger).start(path)``, with ``availableNow`` kept on every Spark.

    From 4.2 this is just that. On 4.0 and 4.1 Spark runs an availableNow query over a Python
    source as one micro-batch, capped by ``maxRecordsPerTrigger`` / ``maxFilesPerTrigger``; the
    query returned (:class:`AvailableNowRuns`) repeats such runs until one finds nothing new.
    """
    keywords = dict(trigger or {})
    if keywords.get("availableNow") is True:
        if len(keywords) > 1:
            raise ValueError(f"trigger {keywords}: availableNow takes no other trigger; give one.")
        if not ADMISSION_CONTROL:
            return AvailableNowRuns(writer, path=path)  # type: ignore[return-value]
    if keywords:
        writer = writer.trigger(**keywords)
    return writer.start(path)


class AvailableNowRuns:
    """Trigger.AvailableNow on Spark 4.0/4.1 over a Python data source, as one query.

    Each run (``trigger(availableNow=True).start()`` on the same checkpoint) is one micro-batch;
    a thread starts the next when one ends having read something, and stops at the first run that
    reads nothing (so prompts that land while it runs are read too), fails or is stopped. It
    answers what a ``StreamingQuery`` answers: ``id`` is the query's, ``runId`` the current run's.
    """

    def __init__(self, writer: DataStreamWriter, *, path: str | None = None) -> None:
        self._writer = writer.trigger(availableNow=True)
        self._path = path
        self._stopping = threading.Event()
        self._start_error: Exception | None = None
        self._runs: list[StreamingQuery] = [self._writer.start(path)]
        self._thread = threading.Thread(
            target=self._drive, name="dspark-json availableNow runs", daemon=True
        )
        self._thread.start()

    def _drive(self) -> None:
        _activate_session(self._writer)
        while True:
            run = self._runs[-1]
            try:
                run.awaitTermination()
            except Exception:  # the run failed: exception() and awaitTermination() say so
                return
            if self._stopping.is_set() or not _read_something(run):
                logger.info("availableNow: done after %d run(s)", len(self._runs))
                return
            try:
                self._runs.append(self._writer.start(self._path))
            except Exception as exc:  # raised again by awaitTermination()
                self._start_error = exc
                return

    @property
    def _run(self) -> StreamingQuery:
        return self._runs[-1]

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def runId(self) -> str:
        return self._run.runId

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def isActive(self) -> bool:
        return self._thread.is_alive()

    @property
    def status(self) -> dict[str, Any]:
        return self._run.status

    @property
    def recentProgress(self) -> list[Any]:
        return [progress for run in list(self._runs) for progress in run.recentProgress]

    @property
    def lastProgress(self) -> Any:
        progress = self.recentProgress
        return progress[-1] if progress else None

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        """Wait for the last run; raise what a run raised (``StreamingQueryException``)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        if self._start_error is not None:
            raise self._start_error
        self._run.awaitTermination()  # raises the run's failure, if any
        return None if timeout is None else True

    def processAllAvailable(self) -> None:
        self.awaitTermination()

    def exception(self) -> Any:
        return self._run.exception()

    def stop(self) -> None:
        self._stopping.set()
        while self._thread.is_alive():  # a run may start just before the thread sees the flag
            self._run.stop()
            self._thread.join(1)

    def explain(self, extended: bool = False) -> None:
        self._run.explain(extended)


def _activate_session(writer: DataStreamWriter) -> None:
    """Make the writer's session the active one of this thread's JVM twin: Spark 4.0/4.1 look a
    Python data source sink up in the active session, and a new thread has none."""
    session = getattr(writer, "_spark", None)  # classic pyspark 4.0/4.1; Spark Connect has no JVM
    jvm_session = getattr(session, "_jsparkSession", None)
    if jvm_session is not None:
        session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(jvm_session)  # type: ignore[union-attr]


def _read_something(run: StreamingQuery) -> bool:
    """Whether a finished run read a micro-batch (a non-empty offset range of some source)."""
    return any(
        source.startOffset != source.endOffset
        for progress in run.recentProgress
        for source in progress.sources
    )
