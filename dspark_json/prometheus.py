"""Option ``prometheusPort``: the run's figures for Prometheus, served on the driver.

A scrape of ``http://<driver>:<port>/metrics`` reads the progress records under option
``metrics`` (:func:`dspark_json.progress.snapshot`) and answers in Prometheus' text exposition
format (version 0.0.4), with Prometheus' naming conventions (a ``dspark_json_`` prefix, base
units, ``_total`` for counters). The names are listed in :data:`METRICS` and in
docs/guide/watching-a-run.md. The server is the standard library's, in a daemon thread: no
new dependency, and nothing runs between scrapes.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dspark_json.progress import snapshot
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = ["METRICS", "exposition", "serve"]

logger = logging.getLogger("dspark_json")

#: Each metric: (name, type, help).
METRICS: tuple[tuple[str, str, str], ...] = (
    ("dspark_json_prompts_total", "counter", "Prompts done in this run."),
    ("dspark_json_prompts_planned", "gauge", "Prompts the run will read, where known."),
    ("dspark_json_rows_total", "counter", "Rows done, by _status (ok, http_error, ...)."),
    ("dspark_json_requests_total", "counter", "HTTP attempts sent to the model server."),
    ("dspark_json_retries_total", "counter", "HTTP attempts that were retries."),
    ("dspark_json_tokens_total", "counter", "Tokens, by kind: input, output, cached."),
    ("dspark_json_cost_usd_total", "counter", "Cost in USD (option pricing)."),
    ("dspark_json_held_seconds_total", "counter", "Seconds requests were held by the pool."),
    ("dspark_json_model_requests_total", "counter", "HTTP attempts, by model."),
    ("dspark_json_model_tokens_total", "counter", "Tokens, by model and kind."),
    ("dspark_json_rows_per_second", "gauge", "Prompts done per second in this run."),
    ("dspark_json_eta_seconds", "gauge", "Seconds left, where the total is known."),
    ("dspark_json_tasks_running", "gauge", "Tasks sending prompts now."),
    ("dspark_json_run_finished", "gauge", "1 once the run has ended, else 0."),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample's value, exact: a count as its digits (``:g`` kept six: 98765432 tokens read
    9.87654e+07, and a counter's increments under its sixth digit were lost to ``rate()``),
    a float as its shortest round-trip text, infinities and NaN as Prometheus writes them."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def exposition(shot: Mapping[str, Any]) -> str:
    """A progress snapshot in Prometheus' text format."""
    samples: dict[str, list[tuple[str, float]]] = {name: [] for name, _, _ in METRICS}
    samples["dspark_json_prompts_total"].append(("", shot["prompts"]["done"]))
    if shot["prompts"]["total"] is not None:
        samples["dspark_json_prompts_planned"].append(("", shot["prompts"]["total"]))
    samples["dspark_json_rows_total"].append(('{status="ok"}', shot["ok"]))
    for status, n in sorted(shot["errors"].items()):
        samples["dspark_json_rows_total"].append((f'{{status="{_label(status)}"}}', n))
    samples["dspark_json_requests_total"].append(("", shot["requests"]))
    samples["dspark_json_retries_total"].append(("", shot["retries"]))
    for kind, n in shot["tokens"].items():
        samples["dspark_json_tokens_total"].append((f'{{kind="{kind}"}}', n))
    if shot["cost_usd"] is not None:
        samples["dspark_json_cost_usd_total"].append(("", shot["cost_usd"]))
    samples["dspark_json_held_seconds_total"].append(("", shot["held_seconds"]))
    for model, figures in sorted(shot["models"].items()):
        name = _label(model)
        samples["dspark_json_model_requests_total"].append(
            (f'{{model="{name}"}}', figures["requests"])
        )
        for kind, n in figures["tokens"].items():
            samples["dspark_json_model_tokens_total"].append(
                (f'{{model="{name}",kind="{kind}"}}', n)
            )
    if shot["rows_per_second"] is not None:
        samples["dspark_json_rows_per_second"].append(("", shot["rows_per_second"]))
    if shot["eta_seconds"] is not None:
        samples["dspark_json_eta_seconds"].append(("", shot["eta_seconds"]))
    samples["dspark_json_tasks_running"].append(("", shot["tasks"]["running"]))
    samples["dspark_json_run_finished"].append(("", 1 if shot["state"] == "finished" else 0))
    lines = []
    for name, kind, text in METRICS:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{labels} {_number(value)}" for labels, value in samples[name]]
    return "\n".join(lines) + "\n"


#: The servers this process started, by (host, port).
_SERVING: dict[tuple[str, int], ThreadingHTTPServer] = {}
_LOCK = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    metrics = ""
    storage: StorageSettings = ENVIRONMENT_ONLY

    def do_GET(self) -> None:
        if self.path.split("?")[0] not in ("/metrics", "/"):
            self.send_error(404, "try /metrics")
            return
        try:
            body = exposition(snapshot(self.metrics, storage=self.storage)).encode("utf-8")
        except Exception as exc:  # a scrape never stops the query
            logger.warning("prometheusPort: the figures could not be read (%s)", exc)
            self.send_error(500, "figures not readable")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("prometheusPort: " + format, *args)


def serve(
    port: int, metrics: str, *, storage: StorageSettings = ENVIRONMENT_ONLY, host: str = ""
) -> ThreadingHTTPServer | None:
    """Serve the run's figures on ``port`` (0: a free one) in a daemon thread; ``None`` (and a
    WARN) where the port cannot be had: the query runs on without it.

    A port this process serves already (a query run again in the same driver, a notebook's
    restarted query, each run of ``dspark_json.start`` on Spark 4.0 and 4.1) is pointed at the
    new run's ``metrics``: the server of the run before would hold the port and go on showing
    the old run's figures."""
    with _LOCK:
        running = _SERVING.get((host, port)) if port else None
        if running is not None and running.socket.fileno() != -1:  # not closed since
            handler_class = running.RequestHandlerClass
            handler_class.metrics = metrics  # type: ignore[attr-defined]
            handler_class.storage = storage  # type: ignore[attr-defined]
            logger.info(
                "prometheusPort: the figures of %s at http://%s:%d/metrics",
                metrics,
                host or "0.0.0.0",
                port,
            )
            return running
        return _start(port, metrics, storage, host)


def _start(
    port: int, metrics: str, storage: StorageSettings, host: str
) -> ThreadingHTTPServer | None:
    handler = type("Handler", (_Handler,), {"metrics": metrics, "storage": storage})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        logger.warning(
            "prometheusPort=%d: cannot listen (%s); no figures for Prometheus this run. Pick a "
            "free port, or 0 for any.",
            port,
            exc,
        )
        return None
    server.daemon_threads = True
    if port:
        _SERVING[(host, port)] = server
    threading.Thread(
        target=server.serve_forever, name="dspark-json-prometheus", daemon=True
    ).start()
    logger.info(
        "prometheusPort: the run's figures at http://%s:%d/metrics",
        host or "0.0.0.0",
        server.server_address[1],
    )
    return server
