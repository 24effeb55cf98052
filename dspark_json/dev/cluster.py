"""The deployments users run, on 127.0.0.1: a Spark standalone cluster (Master and Worker, each
its own JVM, executors in JVMs of their own) and a Spark Connect server.

Both come from the pyspark package itself (``bin/spark-class``, ``bin/spark-submit``): no Spark
download. Used by the tests and the benchmarks, so that both run the parts a cluster runs.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from dspark_json.dev.service import Service, free_port, wait_for_port

__all__ = ["ConnectServer", "StandaloneCluster", "spark_home"]


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class _JavaProcess:
    """A Spark JVM started by a script of ``bin/``, its output kept; stopped with its group."""

    def __init__(self, args: list[str], env: Mapping[str, str], log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.args = args
        self._file = log.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            args,
            stdout=self._file,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,  # its own group: stop() takes its children too
            # Only a prctl call in the child (no import, no lock): safe with threads.
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line of the log that matches ``pattern``; fail if the process ends first."""
        deadline = time.monotonic() + timeout
        compiled = re.compile(pattern)
        while True:
            text = self.log.read_text(encoding="utf-8", errors="replace")
            found = compiled.search(text)
            if found:
                return found
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{' '.join(self.args[:2])} did not log {pattern!r} "
                    f"(exit {self.process.returncode}); its log ends:\n{text[-3000:]}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._file.close()


_PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the process that started it dies
    (a test process killed by a timeout must not leave a cluster behind)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _environment(drop: Iterable[str], extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env.update(
        {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    env.update(extra)
    return env


class StandaloneCluster(Service):
    """A Master and a Worker (``cores``, ``memory``) on 127.0.0.1; ``url`` is the master URL.

    ``drop_env`` names variables the daemons (and so the executors) must not inherit from this
    process: a secret meant to reach executors only through ``spark.executorEnv``, say. Logs go
    to ``work_dir``. Use as a context manager.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        cores: int = 2,
        memory: str = "2g",
        drop_env: Iterable[str] = (),
    ) -> None:
        self.work_dir = work_dir
        self.cores = cores
        self.memory = memory
        self.env = _environment(
            drop_env, {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
        )
        self.url = ""
        self._master: _JavaProcess | None = None
        self._worker: _JavaProcess | None = None

    def start(self, timeout: float = 180) -> StandaloneCluster:
        spark_class = str(spark_home() / "bin" / "spark-class")
        self._master = _JavaProcess(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--webui-port",
                "0",
            ],
            self.env,
            self.work_dir / "master.log",
        )
        found = self._master.wait_for(r"Starting Spark master at (spark://\S+)", timeout)
        self.url = found.group(1)
        self._worker = _JavaProcess(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(self.work_dir / "worker"),
            ],
            self.env,
            self.work_dir / "worker.log",
        )
        self._worker.wait_for(r"Successfully registered with master", timeout)
        return self

    def executor_logs(self) -> list[Path]:
        """The stderr files of the executors the Worker started (one directory per executor)."""
        return sorted((self.work_dir / "worker").glob("*/*/stderr"))

    def stop(self) -> None:
        for daemon in (self._worker, self._master):
            if daemon is not None:
                daemon.stop()
        self._worker = self._master = None


class ConnectServer(Service):
    """A Spark Connect server (``spark-submit --class ...SparkConnectServer``) on 127.0.0.1;
    ``url`` (``sc://127.0.0.1:port``) is what a client's ``SparkSession.builder.remote`` takes.
    Its own Spark runs ``master``, with ``conf``."""

    def __init__(
        self,
        work_dir: Path,
        *,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.master = master
        self.conf = {
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": sys.executable,
            **(conf or {}),
        }
        self.url = ""
        self._server: _JavaProcess | None = None

    def start(self, timeout: float = 180) -> ConnectServer:
        port = free_port()
        args = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            "dspark-json Spark Connect",
            "--master",
            self.master,
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
        ]
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        self._server = _JavaProcess(args, _environment((), {}), self.work_dir / "connect.log")
        self._server.wait_for(r"Spark Connect server started", timeout)
        wait_for_port(port, timeout, self._server.process, "The Spark Connect server")
        self.url = f"sc://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
