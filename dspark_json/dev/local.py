"""The embedded default: a local Spark session and a simulator process on 127.0.0.1.

Used by the demo, the tests and the benchmarks, so all three run the same real parts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import httpx

from dspark_json.dev.engine import Engine
from dspark_json.dev.service import Service
from dspark_json.dev.simulator import Faults

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SimulatorProcess", "local_spark"]


def local_spark(app_name: str = "dspark-json", *, cores: int = 2) -> SparkSession:
    """A local-mode Spark session whose Python workers use this interpreter (public: the
    quick start, docs/getting-started/local.md, names it).

    ``PYSPARK_PYTHON`` is what makes Spark's Python processes (the data source's planning and
    its tasks) run this interpreter, which has dspark_json: PySpark reads it when the session
    starts; ``spark.pyspark.python`` alone does not reach a Python data source's processes.
    Also UTC session time, no UI, ``cores`` shuffle partitions and a 2 GB driver.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


class SimulatorProcess(Service):
    """``dspark-json simulate`` in a child process; ``url`` is where it listens. ``model`` may
    name several models, comma-separated (``--served-model-name a,b``).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        seed: int = 0,
        model: str = "dspark-sim",
        latency: float = 0.0,
        faults: Faults | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.args = [
            sys.executable,
            "-m",
            "dspark_json",
            "simulate",
            "--port",
            str(port),
            "--seed",
            str(seed),
            "--model",
            model,
            "--latency",
            str(latency),
        ]
        if engine is not None:
            self.args += engine.to_args()
        self.env = dict(os.environ)
        if faults is not None:
            self.args += faults.to_args()
            if faults.api_key is not None:
                # By environment, not argv: a process list shows arguments.
                self.env["DSPARK_SIM_API_KEY"] = faults.api_key
                self.args.append("--api-key-env=DSPARK_SIM_API_KEY")
        self.model = model
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> SimulatorProcess:
        self._process = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if "http://" not in line:
            self.stop()
            raise RuntimeError(f"The simulator did not start: {line!r}")
        self.url = line.strip().rsplit(" ", 1)[-1]
        return self

    def stats(self) -> dict[str, int]:
        """The server's request counters (``GET /stats``)."""
        counts: dict[str, int] = httpx.get(f"{self.url}/stats", timeout=5).json()
        return counts

    def serve_models(self, *models: str) -> None:
        """Serve these models from now on (``POST /served-models``): a model loaded later, or
        unloaded, as a pool's replica does."""
        response = httpx.post(f"{self.url}/served-models", json={"models": list(models)}, timeout=5)
        response.raise_for_status()

    def hold(self, after: int | None) -> None:
        """Hold the completions past the ``after``-th (they wait, unanswered) until
        ``hold(None)``: a run read half-done whatever the machine's speed."""
        response = httpx.post(f"{self.url}/hold", json={"after": after}, timeout=5)
        response.raise_for_status()

    def set_backend(self, ready: bool) -> None:
        """llm-d's gateway mode: the pool behind it has an endpoint (``ready``) or none
        (scaled to zero: every request is 503 ``no healthy upstream``)."""
        response = httpx.post(f"{self.url}/gateway/backends", json={"ready": ready}, timeout=5)
        response.raise_for_status()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)
        self._process = None
