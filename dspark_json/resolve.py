"""The schema of a query, resolved once on the driver.

In this order: a user schema (``.schema(...)``) always wins — Spark then never asks for ours; the
JSON Schema the model is asked to follow (``responseFormat``) types ``parsed``; else the one the
server offers (``schemaEndpoint``); else ``parsed`` is inferred from sample answers. The envelope
is typed from vLLM's documented shape. ``schemaHints`` pin chosen columns on top of any of these.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.types import DataType, StructField, StructType

from dspark_json.client import auth_headers
from dspark_json.ddl import apply_hints, to_ddl
from dspark_json.errors import OptionError, ServerError
from dspark_json.inference import contents_of, infer_type
from dspark_json.inputs import Position, PromptListing, read_segment
from dspark_json.options import Options
from dspark_json.pipeline import fetch
from dspark_json.preflight import check_server, http_get
from dspark_json.replay import read_recorded
from dspark_json.schema import json_schema_to_spark, output_schema
from dspark_json.secrets import redact

__all__ = [
    "Resolved",
    "describe",
    "fetch_served_schema",
    "prepare",
    "resolve_parsed",
    "resolve_schema",
]

logger = logging.getLogger("dspark_json")


@dataclass(frozen=True)
class Resolved:
    """The type of ``parsed`` (``None``: no such column) and where it came from."""

    parsed: DataType | None
    source: str


def prepare(options: Options, *, contact_server: bool = True) -> Options:
    """The driver's work at ``.load()`` before any schema: check the server and learn the model
    (unless replaying recorded answers), fetch the served JSON Schema, check that validation has
    a schema to validate against."""
    if options.responses is None and contact_server:
        options = options.with_model(check_server(options))
    if options.schema_endpoint is not None and options.response_format is None:
        if not options.endpoints:
            raise OptionError(
                "Option 'schemaEndpoint' is a path on the server: give option 'endpoint' too, "
                "or a full URL."
            )
        options = replace(options, served_schema=fetch_served_schema(options))
    if options.validate_schema and options.json_schema is None:
        raise OptionError(
            "Option 'validateSchema' needs the JSON Schema to validate against: give option "
            "'responseFormat' or 'schemaEndpoint'."
        )
    return options


def resolve_schema(options: Options, passthrough: list[StructField]) -> StructType:
    """The query's output schema (``schemaHints`` applied)."""
    resolved = resolve_parsed(options)
    logger.info("Schema of `parsed`: %s.", resolved.source)
    schema = output_schema(
        passthrough=passthrough, parsed=resolved.parsed, violations=options.validate_schema
    )
    if options.schema_hints:
        schema = apply_hints(schema, list(options.schema_hints))
    return schema


def resolve_parsed(options: Options) -> Resolved:
    if options.response_format is not None:
        return Resolved(json_schema_to_spark(options.response_format), "option responseFormat")
    if options.served_schema is not None:
        parsed = json_schema_to_spark(options.served_schema)
        return Resolved(parsed, f"served at schemaEndpoint {options.schema_endpoint}")
    if options.infer_schema_samples == 0:
        return Resolved(None, "none (inferSchemaSamples=0): no `parsed` column")
    bodies = _sample_bodies(options)
    values = contents_of(bodies)
    if not values:
        return Resolved(
            None,
            f"none: no JSON in the content of {len(bodies)} sample answer(s); give "
            "responseFormat or a schema to type it",
        )
    return Resolved(infer_type(values), f"inferred from {len(values)} sample answer(s)")


def _sample_bodies(options: Options) -> list[str | None]:
    """The first ``inferSchemaSamples`` answers: recorded ones, or asked now."""
    n = options.infer_schema_samples
    listing = PromptListing(options.input_directory)
    segments = listing.segments(Position(), listing.end())
    if options.responses is not None:
        pairs = [p for segment in segments for p in read_recorded(segment)][:n]
        return [outcome.body for _, outcome in pairs]
    records = [r for segment in segments for r in read_segment(segment) if r.problem is None][:n]
    if not records:
        return []
    logger.info(
        "Inferring the schema of `parsed` from the answers to the first %d prompt(s), sent now "
        "(set inferSchemaSamples=0 or give responseFormat to send none).",
        len(records),
    )
    return [o.body for o in fetch(records, options).outcomes]


def fetch_served_schema(options: Options) -> Mapping[str, Any]:
    """The JSON Schema at ``schemaEndpoint`` (a path on the first endpoint, or a URL)."""
    assert options.schema_endpoint is not None
    where = options.schema_endpoint
    endpoint = options.endpoints[0]
    url = where if "://" in where else f"{endpoint.url}/{where.lstrip('/')}"
    key = options.key.resolve()
    response = http_get(url, auth_headers(key, endpoint), [key], option="schemaEndpoint")
    try:
        body = response.json() if response.status_code == 200 else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        for wrapper in ("json_schema", "schema"):  # {"schema": {...}} or a response_format
            inner = body.get(wrapper)
            if isinstance(inner, dict):
                body = inner.get("schema", inner) if wrapper == "json_schema" else inner
        return body
    raise ServerError(
        f"{url} (option 'schemaEndpoint') answered HTTP {response.status_code} without a JSON "
        f"Schema object: {redact(response.text[:200], [key])!r}. Give the schema with option "
        "'responseFormat' instead."
    )


def describe(schema: StructType) -> str:
    """The schema as a tree and as DDL, for ``dspark-json schema``."""
    return f"{schema.treeString()}\nDDL (for .schema(...)):\n{to_ddl(schema)}\n"
