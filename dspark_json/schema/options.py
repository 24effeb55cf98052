"""The options of the schema stage: where the type of ``parsed`` comes from when no schema is
given, the columns to pin, and what drift and validation do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyspark.sql.types import DataType

from dspark_json.option_spec import boolean, choice, nonempty, number, option
from dspark_json.schema.ddl import parse_hints

__all__ = ["EvolutionMode", "SchemaOptions"]

EvolutionMode = Literal["rescue", "failOnNewColumns"]
Hints = tuple[tuple[tuple[str, ...], DataType], ...]


def _hints(name: str, text: str) -> Hints:
    return tuple(parse_hints(text, name))


@dataclass(frozen=True, kw_only=True)
class SchemaOptions:
    """Schema resolution (after a user schema and responseFormat), hints, drift, validation."""

    schema_endpoint: str | None = option(
        "schemaEndpoint",
        "Where the server offers the JSON Schema its answers follow (a path on the endpoint, "
        "e.g. GPUStack's /health/json-schema, or a URL); types `parsed` when responseFormat "
        "is not given.",
        "/health/json-schema",
        convert=nonempty,
    )
    infer_schema_samples: int = option(
        "inferSchemaSamples",
        "With no schema, responseFormat or schemaEndpoint: how many prompts (the first ones) to "
        "send at .load() to infer `parsed` from their answers (recorded answers with option "
        "responses: nothing is sent). 0: no `parsed` column.",
        "20",
        convert=number(int, low=0),
        default="8",
    )
    schema_hints: Hints | None = option(
        "schemaHints",
        "Column types to pin on top of the resolved schema, as DDL: paths into structs, added "
        "if missing (as in Auto Loader).",
        "parsed.score DOUBLE, parsed.tags ARRAY<STRING>",
        convert=_hints,
    )
    schema_evolution_mode: EvolutionMode = option(
        "schemaEvolutionMode",
        "What a field the schema does not know does: rescue (kept in _rescued_data, the "
        "default) or failOnNewColumns (the query stops, naming the new fields).",
        "failOnNewColumns",
        convert=choice({"rescue": "rescue", "failonnewcolumns": "failOnNewColumns"}),
        default="rescue",
    )
    validate_schema: bool = option(
        "validateSchema",
        "Validate each answer's JSON against the JSON Schema (responseFormat or "
        "schemaEndpoint) with jsonschema; violations land in column _schema_violations, the "
        "rows are kept.",
        "true",
        convert=boolean,
        default="false",
    )
