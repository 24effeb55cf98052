"""A good tenant of a shared model pool: an interactive tenant's latency beside our stream.

    .venv/bin/python benchmarks/shared_pool.py            # writes results/shared_pool.{md,json,png}
    .venv/bin/python benchmarks/shared_pool.py --smoke    # tiny sizes

One simulator process configured like one vLLM replica: ``--capacity`` sequences at once
(vLLM's ``max_num_seqs``, default 16), ``--answer-ms`` per answer (default 250), the rest queued,
``--scheduling-policy priority`` (requests without a priority are all priority 0, so they are
served first come first served, as vLLM's default fcfs serves them). An interactive tenant sends
open-loop Poisson arrivals at half the replica's capacity (asyncio + httpx, priority 0); its
latency is the server's own (arrival to answer, the simulator's ``/stats/latency`` by the
tenant's ``x-dspark-tenant`` header), so that the benchmark's own client is not measured.

Scenarios, one after another in one run, on the same server:

- ``alone``: the tenant only;
- ``today``: beside a stream of ``--stream`` prompts with today's options (the latency-driven
  in-flight limit, up to maxConcurrency=32);
- ``priority``: the stream's requests with option ``priority`` = 10;
- ``maxServerQueue``: the stream with option ``maxServerQueue`` = 0;
- ``both``: the two.

Behind llm-d (``--llm-d``: results in ``results/shared_pool_llm_d.{md,json}``): the simulator
answers as llm-d's gateway in front of that replica (``--gateway llm-d``, objective ``batch``
sheddable): it sheds a sheddable request with a 429 and ``x-llm-d-request-dropped-reason`` while
the replica is full. Scenarios ``llm-d alone`` (the tenant only) and ``llm-d sheddable`` (the
stream with option ``requestHeaders`` naming the sheddable objective; today's other options):
the stream retries each shed request until ``requestDeadline`` and takes what the gateway lets
through; ``shed`` is the gateway's count of shed requests in the scenario.

At width (``--tasks N --replicas R``: results in ``results/shared_pool_width_N.{md,json,png}``):
``R`` simulator replicas, the tenant at half their capacity in all (its requests spread over
them in turn), and the stream as ``N`` task processes at once, each sending to all the
replicas (as ``N`` Spark tasks of one executor machine do). Scenarios ``alone``, ``both``
and ``both unshared`` (each task taking the whole room a reading shows, as the gate did before
the room was split: the side-by-side figure). ``/metrics`` reads per second per replica: the
simulators' count of ``/metrics``
requests in the window (``metrics_reads``), over the window and the replicas. With ``--base
DIR`` (a worktree of main), a scenario named ``NAME@base`` in ``--scenarios`` runs ``NAME`` with
the stream on that tree's ``dspark_json`` (the simulators and the tenant stay this tree's), side
by side with this tree's in the same run; a name given twice runs twice (in turns).

The stream is the source's executor-side client (``http.client.complete_all``, as one Spark
task sends its partition, with the same ``HttpOptions``) in a process of its own, not a Spark
stream: Spark's start and the parse would only add time outside the window measured. The
tenant is measured for ``--window`` seconds after ``--warmup`` seconds of the stream alone; the
stream's rate is the server's answers in that window minus the tenant's, as a share of the spare
capacity (capacity/answer time minus the tenant's rate). The stream process is then stopped and
the server drains before the next scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults

RESULTS = Path(__file__).parent / "results"
MODEL = "dspark-sim"
SCENARIOS: dict[str, dict[str, int] | None] = {
    "alone": None,
    "today": {},
    "priority": {"priority": 10},
    "maxServerQueue": {"max_server_queue": 0},
    "both": {"priority": 10, "max_server_queue": 0},
}
#: Behind the simulated llm-d gateway (``--llm-d``): the stream marked sheddable by header.
LLM_D_SCENARIOS: dict[str, dict[str, int] | None] = {
    "llm-d alone": None,
    "llm-d sheddable": {"sheddable": 1},
}
#: At width (``--tasks``): ``both unshared`` is ``both`` with each task taking the whole room a
#: reading shows (``http.readings.tasks`` answering one task: the gate before its room was
#: split), for the side-by-side figure.
WIDTH_SCENARIOS: dict[str, dict[str, int] | None] = {
    "alone": None,
    "both": {"priority": 10, "max_server_queue": 0},
    "both unshared": {"priority": 10, "max_server_queue": 0, "unshared": 1},
}
#: At width on several simulated machines (``--machines M``): the tasks split among ``M`` lease
#: and reading directories (one per machine, each its own TMPDIR: no machine sees another's
#: tasks), with the pool's width the driver learns from the records (``HttpOptions.pool_width``
#: = (M, tasks)) and without it (each machine's tasks taking the room once: up to M times).
MACHINE_SCENARIOS: dict[str, dict[str, int] | None] = {
    "alone": None,
    "both width told": {"priority": 10, "max_server_queue": 0, "width": 1},
    "both width unknown": {"priority": 10, "max_server_queue": 0},
}
OBJECTIVE = '{"x-llm-d-inference-objective": "batch"}'


def stream_worker(
    url: str,
    prompts: int,
    priority: int | None,
    max_queue: int | None,
    *,
    sheddable: bool = False,
    ready: str = "",
) -> None:
    """The stream: ``prompts`` requests through the source's client, as one task sends them, to
    the replicas ``url`` names (comma-separated); ``ready``: a file made once it starts."""
    from dspark_json.http.client import complete_all
    from dspark_json.http.endpoints import Endpoint
    from dspark_json.http.options import HttpOptions

    extra = {"priority": priority} if priority is not None else {}
    bodies = [
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"Summarise ticket {i}."}],
            "max_tokens": 64,
            **extra,
        }
        for i in range(prompts)
    ]
    from dspark_json.http.headers import request_headers

    headers = request_headers("requestHeaders", OBJECTIVE if sheddable else "")
    config = HttpOptions(
        endpoints=tuple(Endpoint(u) for u in url.split(",")),
        max_server_queue=max_queue,
        request_headers=headers,
    )
    from dspark_json.http import readings

    if os.environ.get("SHARED_POOL_UNSHARED"):  # the gate as before: each task the whole room
        readings.tasks = lambda url, task, where=None, route="": readings.Share(1, 0)  # type: ignore[assignment]
    if os.environ.get("SHARED_POOL_MACHINE"):  # a simulated machine: its own place in the ranks
        readings.MACHINE = 7919 * int(os.environ["SHARED_POOL_MACHINE"])
    if os.environ.get("SHARED_POOL_WIDTH"):  # (machines, tasks at once), as the driver says
        machines, tasks = (int(x) for x in os.environ["SHARED_POOL_WIDTH"].split(","))
        config = replace(config, pool_width=(machines, tasks))
    if os.environ.get("SHARED_POOL_TRACE"):
        _trace(Path(os.environ["SHARED_POOL_TRACE"]))
    if ready:
        Path(ready).touch()
    complete_all(bodies, config)


def _trace(folder: Path) -> None:
    """``SHARED_POOL_TRACE=DIR`` (a diagnosis, not a figure of the results): the stream process
    counts the gate's readings that were none (the fetch failed: nothing held), how late its own
    loop woke (p95), the targets it had, and writes the gate's decisions: at each reading
    (``readings``: when, endpoint, the room it showed, the tasks splitting it, this task's part,
    its in-flight and its target before and after) and every 20 ms (``samples``: when, endpoint,
    target, in flight, let through, allowed); to ``DIR/<pid>.json`` at SIGTERM."""
    from dspark_json.http import client, gauges

    counts: dict[str, Any] = {"reads": 0, "none": 0, "lags": [], "targets": []}
    decisions: list[list[Any]] = []
    samples: list[list[Any]] = []
    seen: dict[str, Any] = {}
    read = gauges.GAUGES.read

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reading = await read(*args, **kwargs)
        seen["url"] = args[0]  # the gate goes on with this reading at once (no await between)
        counts["reads"] += 1
        counts["none"] += reading is None
        return reading

    gauges.GAUGES.read = counted  # type: ignore[method-assign]
    _trace_decisions(seen, decisions)
    wait = gauges.Gate.wait

    waiters: dict[str, int] = {}

    async def traced_wait(self: Any, url: str, *args: Any, **kwargs: Any) -> Any:
        waiters[url] = waiters.get(url, 0) + 1  # by the endpoint it was sent to in turn
        try:
            return await wait(self, url, *args, **kwargs)
        finally:
            waiters[url] -= 1

    gauges.Gate.wait = traced_wait  # type: ignore[method-assign]
    original = client._Run.run

    async def run(self: Any) -> Any:
        async def probe() -> None:
            loop = asyncio.get_running_loop()
            while True:
                asked = loop.time()
                await asyncio.sleep(0.02)
                counts["lags"].append(loop.time() - asked - 0.02)
                gate = self.pool.gate
                if gate is None:
                    continue
                _sample(gate, samples, waiters)
                if len(counts["lags"]) % 25 == 0:
                    counts["targets"].append([b.target for b in gate._budgets.values()])

        task = asyncio.ensure_future(probe())
        try:
            return await original(self)
        finally:
            task.cancel()

    client._Run.run = run  # type: ignore[method-assign]

    def dump(*_: Any) -> None:
        lags = sorted(counts["lags"])
        out = {
            "reads": counts["reads"],
            "none": counts["none"],
            "lag_p95_ms": 1000 * lags[int(0.95 * len(lags))] if lags else None,
            "targets": counts["targets"][-40:],
            "readings": decisions,
            "samples": samples,
            "machine": os.environ.get("SHARED_POOL_MACHINE", ""),
        }
        (folder / f"{os.getpid()}.json").write_text(json.dumps(out))
        os._exit(0)

    signal.signal(signal.SIGTERM, dump)


def _sample(gate: Any, samples: list[list[Any]], waiters: dict[str, int]) -> None:
    """Each endpoint's budget now: when, endpoint, target, in flight, let through, allowed
    (None: no bound), requests waiting at its gate."""
    now, wall = time.monotonic(), time.time()
    for url, b in gate._budgets.items():
        allowed = gate._allowed(b, now)
        allowed = None if allowed == float("inf") else allowed
        samples.append([wall, url, b.target, b.inflight, b.passed, allowed, waiters.get(url, 0)])


def _trace_decisions(seen: dict[str, Any], decisions: list[list[Any]]) -> None:
    """The gate's steps at each reading, kept in ``decisions`` (``seen["url"]``: the endpoint
    whose reading the gate goes on with)."""
    from dspark_json.http import gauges

    room, part, target = gauges.room, gauges.part, gauges.target

    def traced_room(reading: Any, max_queue: int) -> float:
        seen["room"] = room(reading, max_queue)
        seen["reading"] = (reading.waiting, reading.running, reading.kv, reading.at)
        return seen["room"]  # type: ignore[no-any-return]

    def traced_part(free: float, share: Any, shift: int) -> float:
        seen["count"] = share.count
        seen["part"] = part(free, share, shift)
        return seen["part"]  # type: ignore[no-any-return]

    def traced_target(previous: Any, inflight: int, free: float, queued: bool) -> Any:
        after = target(previous, inflight, free, queued)
        steps = [seen.get(k) for k in ("url", "reading", "room", "count", "part")]
        decisions.append([time.time(), *steps, inflight, previous, after, queued])
        return after

    gauges.room, gauges.part, gauges.target = traced_room, traced_part, traced_target  # type: ignore[assignment]


def summarise_trace(folder: Path, bin_s: float = 0.1) -> dict[str, Any]:
    """What one scenario's trace (``SHARED_POOL_TRACE``'s folder of it) says, over the window
    measured: each task's mean requests in flight (sorted), and per replica the simulator's
    running and waiting counts, the stream's requests in flight and the sum of the tasks'
    targets there (by ``bin_s`` bins), the requests held at its gates, and the most waiting in
    the 10 s before the window and at its start (a start that flooded the pool)."""
    window = json.loads((folder / "window.json").read_text())
    t0, t1, urls = window["t0"], window["t1"], window["urls"]
    traces = [
        json.loads(path.read_text()) for path in folder.glob("*.json") if path.stem != "window"
    ]
    bins = int((t1 - t0) / bin_s)
    per_task = []
    summed = {
        url: [[0.0, 0.0, 0.0] for _ in range(bins)] for url in urls
    }  # in flight, target, held
    for trace in traces:
        last: dict[tuple[str, int], list[Any]] = {}
        for sample in trace["samples"]:
            if t0 <= sample[0] < t0 + bins * bin_s:
                last[(sample[1], int((sample[0] - t0) / bin_s))] = sample
        means = {url: 0.0 for url in urls}
        for (url, at), sample in last.items():
            summed[url][at][0] += sample[3]
            summed[url][at][1] += sample[2] or 0.0
            summed[url][at][2] += sample[6]
            means[url] += sample[3] / bins
        per_task.append(round(sum(means.values()), 2))
    replicas = {}
    for i, url in enumerate(urls):
        load = window["loads"][url]
        inside = [(r, w) for when, r, w in load if t0 <= when <= t1]
        before = [w for when, _, w in load if t0 - 10 <= when < t0]
        start = [w for when, _, w in load if t0 <= when < t0 + 1]
        replicas[f"replica {i}"] = {
            "running": round(sum(r for r, _ in inside) / max(len(inside), 1), 2),
            "waiting": round(sum(w for _, w in inside) / max(len(inside), 1), 2),
            "waiting_share": round(sum(w > 0 for _, w in inside) / max(len(inside), 1), 2),
            "stream_in_flight": round(sum(b[0] for b in summed[url]) / max(bins, 1), 2),
            "targets_summed": round(sum(b[1] for b in summed[url]) / max(bins, 1), 2),
            "held_at_its_gates": round(sum(b[2] for b in summed[url]) / max(bins, 1), 1),
            "most_waiting_10s_before": max(before, default=0),
            "most_waiting_first_second": max(start, default=0),
        }
    return {"tasks": len(traces), "in_flight_per_task": sorted(per_task), **replicas}


async def tenant(urls: list[str], name: str, rate: float, seconds: float, seed: int) -> list[float]:
    """Open-loop Poisson arrivals at ``rate`` per second for ``seconds``, to ``urls`` in turn;
    when each answer came (``time.time()``)."""
    rng = random.Random(seed)
    done: list[float] = []
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def ask(i: int) -> None:
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"Hi {name} {i}"}]}
            answer = await client.post(
                f"{urls[i % len(urls)]}/v1/chat/completions",
                json=body,
                headers={"x-dspark-tenant": name},
            )
            answer.raise_for_status()
            done.append(time.time())

        tasks = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        at = start
        i = 0
        while True:
            at += rng.expovariate(rate)
            if at - start > seconds:
                break
            await asyncio.sleep(max(0.0, at - loop.time()))
            tasks.append(asyncio.create_task(ask(i)))
            i += 1
        await asyncio.gather(*tasks)
    return done


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_idle(url: str, limit_s: float = 60) -> None:
    """Until the server has nothing running or waiting (the last scenario's stream drained)."""
    from dspark_json.http.gauges import parse_gauges

    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        gauges = parse_gauges(httpx.get(f"{url}/metrics", timeout=5).text)
        if gauges is not None and gauges[0] == 0 and gauges[1] == 0:
            return
        time.sleep(0.2)


def _worker_env(
    name: str, options: dict[str, int], task: int, machines: str, args: Any
) -> dict[str, str]:
    """The environment of stream task ``task`` in scenario ``name``: its tree, its trace folder,
    its simulated machine (a TMPDIR of its own under ``machines``) and the width told."""
    env = {**os.environ, "SHARED_POOL_UNSHARED": "1" if "unshared" in options else ""}
    if "base" in options:  # the stream on the other tree (option --base)
        env["PYTHONPATH"] = str(args.base.resolve())
    if os.environ.get("SHARED_POOL_TRACE"):  # a folder per scenario
        traced = Path(os.environ["SHARED_POOL_TRACE"], name.replace(" ", "_"))
        traced.mkdir(parents=True, exist_ok=True)
        env["SHARED_POOL_TRACE"] = str(traced)
    if args.machines > 1:
        machine = task % args.machines
        Path(machines, str(machine)).mkdir(exist_ok=True)
        env["TMPDIR"] = str(Path(machines, str(machine)))
        env["SHARED_POOL_MACHINE"] = str(machine)
        if "width" in options:
            env["SHARED_POOL_WIDTH"] = f"{args.machines},{args.tasks}"
    return env


def scenario(
    urls: list[str], name: str, options: dict[str, int] | None, args: Any
) -> dict[str, Any]:
    for url in urls:
        wait_idle(url)
    streams: list[subprocess.Popen[bytes]] = []
    machines = tempfile.mkdtemp(prefix="shared-pool-machines-")  # a TMPDIR per machine
    with tempfile.TemporaryDirectory() as ready:
        if options is not None:
            for task in range(args.tasks):
                command = [sys.executable, __file__, "--stream-worker", ",".join(urls)]
                command += [str(args.stream), str(options.get("priority", ""))]
                command += [str(options.get("max_server_queue", ""))]
                command += [str(options.get("sheddable", "")), f"{ready}/{task}"]
                env = _worker_env(name, options, task, machines, args)
                streams.append(subprocess.Popen(command, start_new_session=True, env=env))
            end = time.monotonic() + 300  # N processes importing on a busy machine
            while len(os.listdir(ready)) < args.tasks and time.monotonic() < end:
                time.sleep(0.2)
            time.sleep(args.warmup)
    capacity_rps = len(urls) * args.capacity / (args.answer_ms / 1000)
    rate = capacity_rps / 2
    stats_before = [httpx.get(f"{url}/stats", timeout=5).json() for url in urls]
    t0 = time.time()
    done = asyncio.run(tenant(urls, name, rate, args.window, args.seed))
    t1 = time.time()
    stats_after = [httpx.get(f"{url}/stats", timeout=5).json() for url in urls]
    for stream in streams:
        os.killpg(stream.pid, signal.SIGTERM)
    for stream in streams:
        stream.wait(timeout=60)
    shutil.rmtree(machines, ignore_errors=True)
    # How late the simulators' own loops woke in the window: the latency the machine's CPU
    # added (the simulators starved), not the queue's.
    lags = [
        late
        for url in urls
        for when, late in httpx.get(f"{url}/stats/lag", timeout=5).json()
        if t0 <= when <= t1
    ]

    if os.environ.get("SHARED_POOL_TRACE") and options is not None:
        loads = {url: httpx.get(f"{url}/stats/load", timeout=5).json() for url in urls}
        window = {"t0": t0, "t1": t1, "urls": urls, "loads": loads}
        traced = Path(os.environ["SHARED_POOL_TRACE"], name.replace(" ", "_"))
        (traced / "window.json").write_text(json.dumps(window))

    def delta(key: str) -> int:
        return sum(
            a.get(key, 0) - b.get(key, 0) for a, b in zip(stats_after, stats_before, strict=True)
        )

    latencies = [
        x for url in urls for x in httpx.get(f"{url}/stats/latency", timeout=5).json()[name]
    ]
    answers = delta("completions_ok")
    stream_rps = (answers - sum(1 for d in done if t0 <= d <= t1)) / (t1 - t0)
    spare = capacity_rps - rate
    figures = {
        "scenario": name,
        "options": options,
        "tasks": args.tasks if options is not None else 0,
        "tenant_requests": len(latencies),
        "tenant_rate_per_s": rate,
        "p50_ms": 1000 * quantile(latencies, 0.50),
        "p95_ms": 1000 * quantile(latencies, 0.95),
        "p99_ms": 1000 * quantile(latencies, 0.99),
        "stream_per_s": stream_rps if options is not None else 0.0,
        "spare_per_s": spare,
        "stream_share_of_spare": stream_rps / spare if options is not None else 0.0,
        "shed": delta("shed"),
        "metrics_reads_per_s_per_replica": delta("metrics_reads") / (t1 - t0) / len(urls),
        "server_loop_lag_p95_ms": 1000 * quantile(lags, 0.95) if lags else None,
    }
    print(json.dumps(figures), flush=True)
    return figures


def chosen(
    names: str, scenarios: dict[str, dict[str, int] | None]
) -> list[tuple[str, dict[str, int] | None]]:
    """The scenarios ``names`` asks for (comma-separated), in its order, a name twice run twice;
    ``NAME@base``: ``NAME`` with the stream on option ``--base``'s tree (``NAME, base``)."""
    picked: list[tuple[str, dict[str, int] | None]] = []
    for name in names.split(","):
        plain = name.removesuffix("@base")
        if plain not in scenarios:
            continue
        options = scenarios[plain]
        if plain != name and options is not None:
            picked.append((f"{plain}, base", {**options, "base": 1}))
        else:
            picked.append((plain, options))
    return picked


def write(out: Path, result: dict[str, Any], stem: str = "shared_pool") -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    shed = stem.startswith("shared_pool_llm_d")  # behind llm-d: the requests it shed
    setup = result["setup"]
    tasks, replicas = setup.get("tasks", 1), setup.get("replicas", 1)
    machines = setup.get("machines", 1)
    width = tasks > 1 or replicas > 1
    alone = result["scenarios"][0]
    rows = [
        "| scenario | tenant p50 ms | p95 ms | p99 ms | p95 / alone | stream req/s | "
        "share of spare |"
        + (" shed |" if shed else "")
        + (" /metrics reads/s per replica | simulators' loop lag p95 ms |" if width else ""),
        "|---|---:|---:|---:|---:|---:|---:|"
        + ("---:|" if shed else "")
        + ("---:|---:|" if width else ""),
    ]
    for s in result["scenarios"]:
        rows.append(
            f"| {s['scenario']} | {s['p50_ms']:.0f} | {s['p95_ms']:.0f} | {s['p99_ms']:.0f} | "
            f"{s['p95_ms'] / alone['p95_ms']:.2f}x | {s['stream_per_s']:.1f} | "
            f"{100 * s['stream_share_of_spare']:.0f}% |"
            + (f" {s['shed']} |" if shed else "")
            + (f" {s['metrics_reads_per_s_per_replica']:.1f} |" if width else "")
            + (f" {s.get('server_loop_lag_p95_ms') or 0:.0f} |" if width else "")
        )
    load = result["load_average_1_5_15_min"]
    based = any(s["scenario"].endswith(", base") for s in result["scenarios"])
    text = [
        "# Shared pool: an interactive tenant beside the stream"
        + (", behind a simulated llm-d gateway" if shed else ""),
        "",
        f"Run {result['date']} on {result['machine']} ("
        + (
            "no other job running: under the machine's quiet lock, the load its own; "
            if setup.get("quiet")
            else "a busy machine: other jobs shared its cores; "
            if load["before"][0] > 1.0
            else "no other job running; "
        )
        + f"load average 1/5/15 min before the run {load['before']}, after "
        f"{load['after']}). Reproduce: `.venv/bin/python benchmarks/shared_pool.py"
        + (" --llm-d" if shed else "")
        + (f" --tasks {tasks} --replicas {replicas}" if width else "")
        + (f" --machines {machines}" if machines > 1 else "")
        + f" --warmup {setup['warmup_s']:g}"
        + (f" --window {setup['window_s']:g}" if setup["window_s"] != 30 else "")
        + (
            " --base <a worktree of main> --scenarios '"
            + ",".join(s["scenario"].replace(", base", "@base") for s in result["scenarios"])
            + "'"
            if based
            else ""
        )
        + "`.",
        "",
        (f"{replicas} simulator replicas, each" if replicas > 1 else "One simulator replica")
        + f": {setup['capacity']} sequences at once, {setup['answer_ms']} ms "
        f"per answer ({setup['capacity_per_s']:.0f} answers/s), "
        + (
            "behind the gateway, first come first served. Interactive "
            if shed
            else "scheduling policy priority (requests without a priority are served in arrival "
            "order, as fcfs). Interactive "
        )
        + f"tenant: open-loop Poisson at {setup['tenant_per_s']:.0f} req/s, priority 0, "
        f"{setup['window_s']:.0f} s per scenario, latency from arrival to answer on the "
        f"server. Stream: {setup['stream_prompts']} prompts through the source's executor "
        "client (`http.client.complete_all`, one task's HttpOptions, maxConcurrency 32) in a "
        + (
            f"process of its own, as {tasks} processes at once ("
            + (
                f"split among {machines} simulated machines: each its own TMPDIR, so its own "
                "readings and leases, none seeing another's tasks"
                if machines > 1
                else "tasks of one machine"
            )
            + ") each sending to all the replicas, "
            if width
            else "process of its own, "
        )
        + f"measured after {setup['warmup_s']:.0f} s; its rate is the "
        "server's answers in the window minus the tenant's.",
        "",
        *rows,
        "",
    ]
    if based:
        text += [
            "`, base`: the same scenario with the stream on main's tree (option `--base`), "
            "side by side in the same run, in turns with this tree's.",
            "",
        ]
    if width:
        text += [
            "`simulators' loop lag p95 ms`: how late the simulators' own event loops woke in the "
            "window (a 20 ms sleep's excess, p95 over the replicas): latency the machine's CPU "
            "added to every answer, the tenant's too, whatever the queue.",
            "",
        ]
    if shed:
        text += [
            "Behind the simulated llm-d gateway, the stream's requests carry option "
            "requestHeaders' `x-llm-d-inference-objective: batch`, a sheddable objective: while "
            "the replica is full the gateway sheds them (429 with x-llm-d-request-dropped-reason)"
            ", the stream retries each until requestDeadline (no priority, no maxServerQueue). "
            "`shed`: the gateway's count of shed requests in the scenario.",
            "",
        ]
    (out / f"{stem}.md").write_text("\n".join(text))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["scenario"] for s in result["scenarios"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for q, offset in (("p50_ms", -0.25), ("p95_ms", 0), ("p99_ms", 0.25)):
        left.bar(
            [i + offset for i in range(len(names))],
            [s[q] for s in result["scenarios"]],
            width=0.25,
            label=q.removesuffix("_ms"),
        )
    left.axhline(1.2 * alone["p95_ms"], color="grey", linestyle="--", label="1.2x p95 alone")
    left.set_xticks(range(len(names)), names, rotation=20)
    left.set_ylabel("tenant latency, ms (server side)")
    left.legend(fontsize=8)
    right.bar(names, [100 * s["stream_share_of_spare"] for s in result["scenarios"]])
    right.axhline(50, color="grey", linestyle="--")
    right.set_ylabel("stream req/s, % of spare capacity")
    right.tick_params(axis="x", rotation=20)
    fig.suptitle(
        f"Interactive tenant beside the stream ({tasks} task(s), {replicas} vLLM-like replica(s))"
        if width
        else "Interactive tenant beside the stream (one vLLM-like replica)"
    )
    fig.savefig(out / f"{stem}.png", dpi=110, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--answer-ms", type=float, default=250)
    parser.add_argument("--stream", type=int, default=3000, help="prompts in the stream")
    parser.add_argument("--window", type=float, default=30, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=4, help="seconds of stream first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="which scenarios, comma-separated"
    )
    parser.add_argument(
        "--llm-d", action="store_true", help="behind the simulated llm-d gateway (its scenarios)"
    )
    parser.add_argument("--tasks", type=int, default=1, help="stream task processes at once")
    parser.add_argument("--replicas", type=int, default=1, help="simulator replicas")
    parser.add_argument(
        "--machines", type=int, default=1, help="machines the tasks are split among (simulated)"
    )
    parser.add_argument(
        "--base",
        type=Path,
        help="another tree (a worktree of main): scenario NAME@base runs its stream with that "
        "tree's dspark_json, side by side with NAME in the same run",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="say that the run had the machine to itself (a lock kept other jobs out)",
    )
    parser.add_argument(
        "--summarise-trace",
        type=Path,
        help="print what a scenario's SHARED_POOL_TRACE folder (DIR/<scenario>) says, and stop",
    )
    parser.add_argument("--stream-worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.summarise_trace:
        print(json.dumps(summarise_trace(args.summarise_trace), indent=1))
        return
    if args.stream_worker:
        url, prompts, priority, max_queue, sheddable, ready = args.stream_worker
        stream_worker(
            url,
            int(prompts),
            int(priority) if priority else None,
            int(max_queue) if max_queue else None,
            sheddable=bool(sheddable),
            ready=ready,
        )
        return
    if args.smoke:
        args.capacity, args.answer_ms, args.stream = 4, 100, 200
        args.window, args.warmup = 1.5, 0.5
    load_before = os.getloadavg()  # the machine is shared: how busy it was, for the record
    faults = Faults(capacity=args.capacity, scheduling_policy="priority")
    scenarios = SCENARIOS
    if args.llm_d:
        faults = Faults(capacity=args.capacity, gateway="llm-d", objectives={"batch": -1})
        scenarios = LLM_D_SCENARIOS
        args.scenarios = ",".join(LLM_D_SCENARIOS)
    elif args.tasks > 1 or args.replicas > 1:
        scenarios = WIDTH_SCENARIOS if args.machines == 1 else MACHINE_SCENARIOS
        if args.scenarios == ",".join(SCENARIOS):
            args.scenarios = ",".join(scenarios)
    with ExitStack() as stack:
        servers = [
            stack.enter_context(SimulatorProcess(latency=args.answer_ms / 1000, faults=faults))
            for _ in range(args.replicas)
        ]
        urls = [server.url for server in servers]
        figures = [scenario(urls, n, o, args) for n, o in chosen(args.scenarios, scenarios)]
    capacity_rps = args.replicas * args.capacity / (args.answer_ms / 1000)
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        "setup": {
            "capacity": args.capacity,
            "answer_ms": args.answer_ms,
            "capacity_per_s": capacity_rps,
            "tenant_per_s": capacity_rps / 2,
            "stream_prompts": args.stream,
            "window_s": args.window,
            "warmup_s": args.warmup,
            "tasks": args.tasks,
            "replicas": args.replicas,
            "machines": args.machines,
            "quiet": args.quiet,
            "stream_driver": "http.client.complete_all in a process per task (a task's client)",
        },
        "load_average_1_5_15_min": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "scenarios": figures,
    }
    stem = "shared_pool_llm_d" if args.llm_d else "shared_pool"
    if args.tasks > 1 or args.replicas > 1:
        stem += f"_width_{args.tasks}"
    if args.machines > 1:
        stem += f"_machines_{args.machines}"
    write(args.out, result, stem)


if __name__ == "__main__":
    main()
