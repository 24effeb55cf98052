"""``parse_dataframe``: a Spark DataFrame column of response bodies (Kafka values, logs, a table
of recorded answers) -> the same typed columns the ``dspark-json`` source yields."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pyspark.sql.types import BinaryType, StringType, StructType

from dspark_json.errors import OptionError, SchemaError
from dspark_json.responses import check_mode, parse_responses, response_schema
from dspark_json.schema import MALFORMED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["parse_dataframe"]


def parse_dataframe(
    df: DataFrame,
    column: str = "value",
    *,
    schema: str | StructType | pa.Schema | None = None,
    response_format: Mapping[str, Any] | None = None,
    backend: Literal["auto", "cpu", "gpu"] = "auto",
    mode: Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"] = "PERMISSIVE",
) -> DataFrame:
    """``df`` with the bodies in ``column`` (string or binary) parsed, on the executors, by
    :func:`~dspark_json.parse_responses`: its other columns, then the response columns.

        answers = dspark_json.parse_dataframe(
            spark.readStream.format("kafka")...load(), "value", response_format=schema
        )
    """
    check_mode(mode)
    if column not in df.columns:
        raise OptionError(
            f"parse_dataframe: column {column!r} is not in the DataFrame (columns: "
            f"{', '.join(df.columns)}). Pass the column that holds the response bodies."
        )
    if not isinstance(df.schema[column].dataType, StringType | BinaryType):
        raise SchemaError(
            f"parse_dataframe: column {column!r} is {df.schema[column].dataType.simpleString()}"
            "; response bodies must be a string or binary column (cast it first)."
        )
    parsed = response_schema(schema, response_format)
    kept = [f for f in df.schema.fields if f.name != column]
    clash = sorted({f.name for f in kept} & set(parsed.names))
    if clash:
        raise SchemaError(
            f"parse_dataframe: the DataFrame already has column(s) {', '.join(clash)}, which "
            "the parsed response brings too. Rename or drop them first."
        )
    out = StructType([*kept, *parsed.fields])
    index = df.columns.index(column)

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            bodies = batch.column(index)
            # DROPMALFORMED is applied here, to the other columns too.
            row_mode: Literal["PERMISSIVE", "FAILFAST"] = (
                "FAILFAST" if mode == "FAILFAST" else "PERMISSIVE"
            )
            table = parse_responses(bodies, schema=parsed, backend=backend, mode=row_mode)
            rest = batch.drop_columns([column])
            if mode == "DROPMALFORMED":
                status = table.column("_status").to_pylist()
                keep = pa.array([s not in MALFORMED for s in status], pa.bool_())
                table, rest = table.filter(keep), rest.filter(keep)
            columns = [*rest.columns, *(c.combine_chunks() for c in table.columns)]
            yield pa.RecordBatch.from_arrays(columns, names=out.names)

    return df.mapInArrow(parse, out)
