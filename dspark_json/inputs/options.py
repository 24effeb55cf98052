"""The options of the input stage: where the rows come from, how they are cut into tasks and
micro-batches, and where each partition's raw answers are journaled."""

from __future__ import annotations

from dataclasses import dataclass

from dspark_json.option_spec import directory, option, positive

__all__ = ["InputOptions"]


@dataclass(frozen=True, kw_only=True)
class InputOptions:
    """Prompt files (or recorded answers), partitions, admission control, the journal."""

    prompts: str | None = option(
        "prompts",
        "Directory (path or URI) of prompt files: JSON lines (.jsonl, .ndjson, .json; also "
        "compressed .gz, .zst, .bz2) or Parquet. Streaming reads pick up new files in name "
        "order; names starting with '.' or '_' are ignored.",
        "/data/prompts",
        convert=directory,
        aliases=("path",),
        required=True,  # unless option responses replays recorded answers
    )
    responses: str | None = option(
        "responses",
        "Instead of prompts: a directory of recorded answers to parse, no HTTP. JSONL of raw "
        "response bodies, or the output of vLLM's / OpenAI's batch runner (custom_id, "
        "response.status_code, response.body, error). Same offsets and file rules as prompts.",
        "/data/batch-output",
        convert=directory,
    )
    journal: str | None = option(
        "journal",
        "Directory where each partition's raw answers are written before its rows go to Spark; "
        "a replayed batch or a retried task reads them instead of calling the model again. "
        "Entries the sink has committed are pruned.",
        "/data/_journal/answers",
        convert=directory,
    )
    partition_size: int | None = option(
        "partitionSize",
        "Prompts per Spark task (input partition). Default: chosen per micro-batch (per read), "
        "as Spark sizes the splits of its file sources: the batch's prompts shared by twice the "
        "cluster's task slots (its default parallelism, which dspark_json.register(spark) "
        "records), at least 256 and at most 2,500 prompts a task; 256 where the slots are not "
        "known (the format registered without register(spark)).",
        "1000",
        convert=positive(int),
    )
    max_records_per_trigger: int | None = option(
        "maxRecordsPerTrigger",
        "Streaming: at most this many prompts per micro-batch. Default: no limit.",
        "10000",
        convert=positive(int),
    )
    max_files_per_trigger: int | None = option(
        "maxFilesPerTrigger",
        "Streaming: at most this many prompt files per micro-batch. Default: no limit.",
        "10",
        convert=positive(int),
    )

    @property
    def location(self) -> str:
        """Where the input rows are: the recorded responses, else the prompts."""
        found = self.responses if self.responses is not None else self.prompts
        assert found is not None, "Options.parse requires prompts or responses"
        return found
