"""Delta tables as the sink: the ``dspark-delta`` format, executors writing the data files.

- :mod:`~dspark_json.delta.stream`: :func:`write_delta`, the short form of a streaming write.
- :mod:`~dspark_json.delta.sink`: the Spark data sink (``format("dspark-delta")``).
- :mod:`~dspark_json.delta.files`: the executors' half, Parquet files into the table location.
- :mod:`~dspark_json.delta.stats`: the files' statistics, for data skipping.
- :mod:`~dspark_json.delta.log`: the driver's half, one Delta commit per micro-batch (delta-rs).

Importing this package imports neither pyspark nor deltalake.
"""

from __future__ import annotations

from dspark_json.delta.stream import write_delta

__all__ = ["write_delta"]
