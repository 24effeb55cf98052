"""Streaming on whichever pyspark runs the tests — CI runs them on the newest and, with
`make test-oldest`, on the oldest supported: read limits, Trigger.AvailableNow, restarts and
replays behave the same on every Spark (what differs is dspark_json/compat.py's business)."""

import ctypes
import os
import struct
import time

import pytest

from dspark_json import compat
from tests.helpers import write_prompts

pytestmark = pytest.mark.spark

SCHEMA = (
    '{"type": "object", "properties": {"word": {"type": "string"}, "n": {"type": "integer"}}, '
    '"required": ["word", "n"]}'
)


def prompts(start, n):
    return [{"custom_id": f"q{i:03d}", "prompt": f"Question {i}"} for i in range(start, start + n)]


def stream(spark, simulator, prompt_dir, **options):
    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(prompt_dir))
        .option("responseFormat", SCHEMA)
        .option("partitionSize", "8")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


class Sink:
    """A ``foreachBatch`` that keeps each micro-batch's custom_ids; it can fail a batch once."""

    def __init__(self, fail_batch=None):
        self.batches: list[tuple[int, list[str]]] = []
        self.fail_batch = fail_batch

    def __call__(self, batch, batch_id):
        ids = sorted(row.custom_id for row in batch.select("custom_id").collect())
        if batch_id == self.fail_batch:
            self.fail_batch = None
            raise RuntimeError(f"injected sink failure in batch {batch_id}")
        self.batches.append((batch_id, ids))

    @property
    def sizes(self):
        return [len(ids) for _, ids in self.batches]

    @property
    def ids(self):
        return [i for _, ids in self.batches for i in ids]


def other_requests(simulator):
    """Requests other than chat completions the server has had, this /stats call included."""
    stats = simulator.stats()
    return stats["requests"] - stats.get("chat_completions", 0)


def run(df, sink, checkpoint, trigger):
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    return compat.start(writer, trigger)


class DirectoryOpens:
    """Counts how often a directory is opened for listing (Linux inotify, IN_OPEN on the
    directory itself), whichever process lists it: Spark's Python workers included."""

    IN_OPEN, IN_ISDIR, IN_NONBLOCK = 0x20, 0x40000000, 0o4000

    def __init__(self, path):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        watch = libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN)
        assert watch >= 0, os.strerror(ctypes.get_errno())
        self.opens = 0

    def count(self):
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return self.opens
            offset = 0
            while offset < len(data):  # struct inotify_event: wd, mask, cookie, len, name
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + length].rstrip(b"\0")
                if mask & self.IN_ISDIR and not name:  # the directory itself, not a file in it
                    self.opens += 1
                offset += 16 + length

    def close(self):
        os.close(self.fd)


def test_a_batch_read_gives_every_row_typed(spark, simulator, tmp_path):
    write_prompts(tmp_path, "a.jsonl", [*prompts(0, 5), {"custom_id": "bad", "text": "none"}])
    df = (
        spark.read.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(tmp_path))
        .option("responseFormat", SCHEMA)
        .load()
    )
    rows = {row.custom_id: row for row in df.collect()}
    assert sorted(rows) == ["bad", *(f"q{i:03d}" for i in range(5))]
    assert rows["bad"]._status == "invalid_prompt" and rows["bad"].parsed is None
    for i in range(5):
        row = rows[f"q{i:03d}"]
        assert row._status == "ok" and row.model == "dspark-sim"
        assert isinstance(row.parsed.word, str) and isinstance(row.parsed.n, int)
        assert abs(row.created.timestamp() - time.time()) < 3600  # a real instant, in UTC


def test_available_now_reads_what_is_there_in_capped_batches_then_stops(spark, simulator, tmp_path):
    prompt_dir = tmp_path / "prompts"
    write_prompts(prompt_dir, "0001.jsonl", prompts(0, 15))
    write_prompts(prompt_dir, "0002.jsonl", prompts(15, 10))
    df = stream(spark, simulator, prompt_dir, maxRecordsPerTrigger=10, journal=tmp_path / "j")
    sink = Sink()
    before = other_requests(simulator)
    watch = DirectoryOpens(prompt_dir)
    query = run(df, sink, tmp_path / "_ckpt", {"availableNow": True})
    query.awaitTermination()
    listings = watch.count()
    watch.close()
    # The server was checked at .load(); the query's processes do not check it again.
    assert other_requests(simulator) == before + 1  # this /stats call
    assert query.exception() is None and not query.isActive
    assert sink.sizes == [10, 10, 5]
    assert sink.ids == [f"q{i:03d}" for i in range(25)]
    # Once per micro-batch, and once more to find nothing new (Spark 4.2+ asks for the latest
    # offset, the reported latest offset and the partitions of each batch: three, before).
    assert listings == len(sink.batches) + 1

    # A new file, the same checkpoint: only it is read.
    write_prompts(prompt_dir, "0003.jsonl", prompts(25, 7))
    query = run(df, sink, tmp_path / "_ckpt", {"availableNow": True})
    query.awaitTermination()
    assert sink.sizes == [10, 10, 5, 7]


def test_the_default_trigger_keeps_max_files_per_trigger(spark, simulator, tmp_path):
    prompt_dir = tmp_path / "prompts"
    for n, size in enumerate([3, 4, 5]):
        write_prompts(prompt_dir, f"{n:04d}.jsonl", prompts(n * 10, size))
    sink = Sink()
    query = run(
        stream(spark, simulator, prompt_dir, maxFilesPerTrigger=2), sink, tmp_path / "c", None
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert sink.sizes == [7, 5]


def test_a_failed_batch_is_replayed_from_the_journal_and_the_stream_goes_on(
    spark, simulator, tmp_path
):
    prompt_dir = tmp_path / "prompts"
    write_prompts(prompt_dir, "0001.jsonl", prompts(0, 25))
    df = stream(spark, simulator, prompt_dir, maxRecordsPerTrigger=10, journal=tmp_path / "j")
    before = simulator.stats().get("chat_completions", 0)
    sink = Sink(fail_batch=1)  # batch 1 is read (and journaled), then the sink fails
    query = run(df, sink, tmp_path / "_ckpt", {"availableNow": True})
    with pytest.raises(Exception, match="injected sink failure in batch 1"):
        query.awaitTermination()
    assert sink.sizes == [10]
    assert simulator.stats()["chat_completions"] - before == 20

    query = run(df, sink, tmp_path / "_ckpt", {"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    assert [b for b, _ in sink.batches] == [0, 1, 2] and sink.sizes == [10, 10, 5]
    assert sink.ids == [f"q{i:03d}" for i in range(25)]
    # Batch 1's answers came back from the journal: each prompt was sent once.
    assert simulator.stats()["chat_completions"] - before == 25
