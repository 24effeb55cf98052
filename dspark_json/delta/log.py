"""The driver's half of the Delta sink: the data files are written already (by the executors,
:mod:`dspark_json.delta.files`); one Delta transaction adds them all, with the application
transaction ``(app id, batch id)`` that makes a replayed micro-batch a no-op.

Only here is ``deltalake`` (delta-rs) imported, on use. A micro-batch that brings new columns
(or new fields of a struct) first widens the table schema in a commit of its own (delta-rs'
``schema_mode="merge"`` rules), then adds its files; a column whose type changed is refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from dspark_json.delta.files import DataFile
from dspark_json.errors import SchemaError, mask_uris
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings, delta_options, delta_uri

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["commit_files", "committed_version", "open_table", "table_partitioning"]

logger = logging.getLogger("dspark_json")


def open_table(table_uri: str, *, storage: StorageSettings = ENVIRONMENT_ONLY) -> DeltaTable | None:
    """The Delta table at ``table_uri``, or None where there is none yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(
            delta_uri(table_uri), storage_options=delta_options(table_uri, storage) or None
        )
    except TableNotFoundError:
        return None


def committed_version(
    table_uri: str, app_id: str, *, storage: StorageSettings = ENVIRONMENT_ONLY
) -> int | None:
    """The last batch id committed under ``app_id``, or None."""
    table = open_table(table_uri, storage=storage)
    return None if table is None else table.transaction_version(app_id)


def table_partitioning(
    table_uri: str, *, storage: StorageSettings = ENVIRONMENT_ONLY
) -> list[str] | None:
    """The partition columns of the table at ``table_uri``, or None where there is no table."""
    table = open_table(table_uri, storage=storage)
    return None if table is None else list(table.metadata().partition_columns)


def commit_files(
    table_uri: str,
    files: Sequence[DataFile],
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    storage: StorageSettings = ENVIRONMENT_ONLY,
    mode: Literal["append", "overwrite"] = "append",
    transaction: tuple[str, int] | None = None,
) -> None:
    """Add ``files`` (rows of ``schema``, partition columns included) to the table in one
    commit, creating the table where there is none; ``transaction`` is (app id, batch id)."""
    from deltalake import CommitProperties, Schema, Transaction, write_deltalake
    from deltalake.transaction import AddAction, create_table_with_add_actions

    adds: list[Any] = [
        AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
        for f in files
    ]
    properties = None
    if transaction is not None:
        app_id, batch_id = transaction
        properties = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
    table = open_table(table_uri, storage=storage)
    store = delta_options(table_uri, storage) or None
    if table is None:
        create_table_with_add_actions(
            delta_uri(table_uri),
            Schema.from_arrow(schema),
            adds,
            mode="error",
            partition_by=list(partition_by),
            storage_options=store,
            commit_properties=properties,
        )
        return
    existing = list(table.metadata().partition_columns)
    if existing != list(partition_by):
        raise SchemaError(
            f"Delta table {mask_uris(table_uri)} is partitioned by {existing or 'nothing'}, "
            f"the sink by "
            f"{list(partition_by) or 'nothing'}: set the sink's partitionBy to "
            f"{','.join(existing)!r} (or write to a new table)."
        )
    if _widens(table_uri, table.schema().to_json(), Schema.from_arrow(schema).to_json()):
        write_deltalake(
            delta_uri(table_uri),
            schema.empty_table(),
            mode="append",
            schema_mode="merge",
            partition_by=existing or None,
            storage_options=store,
        )
        table.update_incremental()
        logger.info("Delta %s: schema widened to %s", table_uri, table.schema().to_json())
    table.create_write_transaction(
        adds,
        mode,
        table.schema(),
        partition_by=existing,
        commit_properties=properties,
    )


def _widens(table_uri: str, table_json: str, batch_json: str) -> bool:
    """Whether the micro-batch's schema adds fields to the table's; raise where a column of
    both has two types."""
    conflicts: list[str] = []
    new = _compare(json.loads(table_json), json.loads(batch_json), "", conflicts)
    if conflicts:
        raise SchemaError(
            f"Delta table {mask_uris(table_uri)}: the micro-batch does not fit the table schema: "
            f"{'; '.join(conflicts)}. Cast the column(s) to the table's type before the sink, "
            "or write to a new table."
        )
    return new


def _compare(table: Any, batch: Any, path: str, conflicts: list[str]) -> bool:
    if isinstance(table, dict) and isinstance(batch, dict) and table["type"] == batch["type"]:
        kind = table["type"]
        if kind == "struct":
            known = {f["name"]: f["type"] for f in table["fields"]}
            new = False
            for f in batch["fields"]:
                where = f"{path}.{f['name']}" if path else f["name"]
                if f["name"] not in known:
                    new = True
                else:
                    new = _compare(known[f["name"]], f["type"], where, conflicts) or new
            return new
        if kind == "array":
            return _compare(table["elementType"], batch["elementType"], f"{path}[]", conflicts)
        if kind == "map":
            keys = _compare(table["keyType"], batch["keyType"], f"{path}{{key}}", conflicts)
            values = _compare(table["valueType"], batch["valueType"], f"{path}{{value}}", conflicts)
            return keys or values
    if table != batch:
        conflicts.append(f"column {path!r} is {_name(table)} in the table, {_name(batch)} here")
    return False


def _name(dtype: Any) -> str:
    return dtype if isinstance(dtype, str) else str(dtype.get("type"))
