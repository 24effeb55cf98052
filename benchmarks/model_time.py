"""Model time: what the source sends and what the server computes, each feature on and off.

    .venv/bin/python benchmarks/model_time.py              # writes results/model_time.{md,json}
    .venv/bin/python benchmarks/model_time.py --smoke      # tiny sizes
    .venv/bin/python benchmarks/model_time.py --endpoint http://127.0.0.1:8000   # real vLLM

Workloads, each run with the feature on and off, side by side in one run:

- (a) a third of the prompts repeated (within their file: dedupe works within a task),
  temperature 0: option ``dedupe`` (auto vs off);
- (b) a few long shared prefixes (few-shot examples of ``--prefix-words`` words) each shared by
  many prompts, shuffled across files: option ``prefixOrder`` (true vs false), on one endpoint
  and on two (affinity); and a control of prompts that share nothing, to show the order costs
  nothing where it cannot help;
- (c) the same prompts run again with option ``cache``: the second run's requests.

Each file is one partition, sent as a Spark task sends it (the pipeline's fetch: request
bodies, dedupe and cache where present, then the client), in process and one after another;
Spark's own start is left out. Per run: requests sent, prompt tokens, of them cached by the
server's prefix cache, prompt tokens computed (total minus cached) as the servers count them
(the simulator's ``/stats``, vLLM's ``/metrics``; else from the answers' usage), wall time, and
the ratios of "on" to "off". On the simulator (the default) each run gets fresh servers with
the model engine of ``dev/engine.py``: vLLM's prefix cache (16-token blocks, an LRU of
``--cache-blocks`` blocks: a few of the prefixes, not all), prefill per uncached token (one
prefill after another) and decode per output token, ``--max-seqs`` sequences at once. With
``--endpoint`` the runs go to that server (vLLM started with ``--enable-prefix-caching
--enable-prompt-tokens-details``); each run's prefixes carry a tag of their own, so that no
run finds another's prefixes in the cache.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from dspark_json.dev.engine import Engine
from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from dspark_json.options import Options, Query
from dspark_json.pipeline import fetch
from dspark_json.records import PromptRecord

RESULTS = Path(__file__).parent / "results"
WORDS = (
    "amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lumen meadow nectar "
    "onyx pollen quartz river saffron tundra umber violet willow xenon yarrow zephyr"
).split()


def _has_option(name: str) -> bool:
    try:
        Options.parse({"endpoint": "http://127.0.0.1:1", "prompts": "/tmp", name: "x"})
    except Exception as exc:  # an unknown option says so; a known one fails on "x" or passes
        return "unknown" not in str(exc).lower() and "did you mean" not in str(exc).lower()
    return True


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def few_shot(tag: str, prefix: int, words: int) -> str:
    """A long system message of few-shot examples, one per prefix (and run tag)."""
    rng = random.Random(f"{tag}:{prefix}")
    return f"[{tag}] Examples set {prefix}. " + text(rng, words)


def workload(
    kind: str, *, prompts: int, prefixes: int, words: int, tag: str, seed: int
) -> list[list[list[dict[str, str]]]]:
    """The conversations of a workload, by file (4 files; prompts shuffled across them)."""
    rng = random.Random(seed)
    convs: list[list[dict[str, str]]] = []
    if kind == "prefixes":
        for i in range(prompts):
            convs.append(
                [
                    {"role": "system", "content": few_shot(tag, i % prefixes, words)},
                    {"role": "user", "content": f"Question {i}: {text(rng, 12)}"},
                ]
            )
    elif kind == "distinct":
        for i in range(prompts):
            convs.append([{"role": "user", "content": f"[{tag}] {i}: {text(rng, 60)}"}])
    else:  # repeated: in each file, a third of the prompts repeat others of the file
        files = []
        for f in range(4):
            size = len(range(f, prompts, 4))
            distinct = size - size // 3
            base = [
                [{"role": "user", "content": f"[{tag}] {f}-{i}: {text(rng, 40)}"}]
                for i in range(distinct)
            ]
            mixed = base + [rng.choice(base) for _ in range(size - distinct)]
            rng.shuffle(mixed)
            files.append(mixed)
        return files
    rng.shuffle(convs)
    return [convs[f::4] for f in range(4)]


def query(endpoints: Sequence[str], model: str, **options: str) -> Query:
    raw = {
        "endpoint": ",".join(endpoints),
        "prompts": "/tmp",
        "model": model,
        "temperature": "0",
        "maxTokens": "32",
        "maxConcurrency": "32",
        **options,
    }
    return Query(options=Options.parse(raw), model=model)


def run_files(files: Sequence[list[list[dict[str, str]]]], q: Query) -> dict[str, Any]:
    """Each file as one partition's fetch; what was sent and what the answers' usage says."""
    requests = prompt = cached = 0
    urls = [e.url for e in q.options.http.endpoints]
    before = server_tokens(urls)
    started = time.perf_counter()
    for f, convs in enumerate(files):
        records = [
            PromptRecord(
                custom_id=f"{f}-{i}",
                messages=messages,
                fields={},
                raw="",
                where=f"file {f} row {i}",
            )
            for i, messages in enumerate(convs)
        ]
        fetched = fetch(records, q)
        requests += fetched.stats.requests
        seen: set[str] = set()
        for body in fetched.outcomes.bodies.to_pylist():
            if body is None:
                continue
            answer = json.loads(body)
            if answer.get("id") in seen:  # one request's answer given to several rows
                continue
            seen.add(answer.get("id"))
            usage = answer.get("usage") or {}
            prompt += usage.get("prompt_tokens") or 0
            cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    seconds = time.perf_counter() - started
    after = server_tokens(urls)
    counted_by = "answers"
    if before is not None and after is not None:  # what the servers computed, not the rows
        prompt, cached = after[0] - before[0], after[1] - before[1]
        counted_by = "server"
    return {
        "requests": requests,
        "rows": sum(len(c) for c in files),
        "distinct": sum(len({json.dumps(m) for m in c}) for c in files),
        "counted_by": counted_by,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "computed_tokens": prompt - cached,
        "seconds": round(seconds, 3),
    }


def server_tokens(urls: Sequence[str]) -> tuple[int, int] | None:
    """(prompt tokens, of them cached) as the servers count them: the simulator's ``/stats``,
    vLLM's ``/metrics`` (``vllm:prompt_tokens_total``, ``vllm:prefix_cache_hits_total``);
    ``None`` where a server reports neither."""
    prompt = cached = 0.0
    for url in dict.fromkeys(urls):
        stats = httpx.get(f"{url}/stats", timeout=30)
        if stats.status_code == 200 and isinstance(stats.json(), dict):
            counts = stats.json()
            prompt += counts.get("prompt_tokens", 0)
            cached += counts.get("cached_tokens", 0)
            continue
        metrics = httpx.get(f"{url}/metrics", timeout=30)
        if metrics.status_code != 200 or "vllm:prompt_tokens_total" not in metrics.text:
            return None
        for line in metrics.text.splitlines():
            if line.startswith("vllm:prompt_tokens_total"):
                prompt += float(line.rsplit(" ", 1)[1])
            elif line.startswith(("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits")):
                cached += float(line.rsplit(" ", 1)[1])
    return int(prompt), int(cached)


@contextmanager
def servers(args: argparse.Namespace, count: int) -> Iterator[tuple[list[str], str]]:
    """Fresh simulators (their caches empty), or the server given."""
    if args.endpoint:
        url = args.endpoint.rstrip("/")
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        yield [url] * 1, model
        return
    engine = Engine(
        cache_blocks=args.cache_blocks, prefill_ms=args.prefill_ms, decode_ms=args.decode_ms
    )
    with ExitStack() as stack:
        procs = [
            stack.enter_context(
                SimulatorProcess(seed=i, engine=engine, faults=Faults(capacity=args.max_seqs))
            )
            for i in range(count)
        ]
        yield [p.url for p in procs], "dspark-sim"


def side_by_side(
    args: argparse.Namespace,
    name: str,
    kind: str,
    option: str,
    values: tuple[str, str],
    *,
    endpoints: int = 1,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One workload with ``option`` on (values[0]) and off (values[1])."""
    runs = []
    for value in values:
        tag = f"{name}-{value}-{time.time_ns()}"
        files = workload(
            kind,
            prompts=args.prompts,
            prefixes=args.prefixes,
            words=args.prefix_words,
            tag=tag,
            seed=args.seed,
        )
        with servers(args, endpoints) as (urls, model):
            options = {option: value, **(extra or {})}
            if option != "prefixOrder":
                options.setdefault("prefixOrder", "false")
            runs.append({option: value, **run_files(files, query(urls, model, **options))})
    on, off = runs
    return {
        "workload": name,
        "option": option,
        "endpoints": endpoints if not args.endpoint else 1,
        "cache_blocks": None if args.endpoint else args.cache_blocks,
        "runs": runs,
        "ratio": {
            key: round(on[key] / off[key], 3) if off[key] else None
            for key in ("requests", "computed_tokens", "seconds")
        },
    }


def rerun_with_cache(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """(c): the prompts of (a) run with option cache, then again with it, and again without:
    the re-runs side by side."""
    tag = f"cache-{time.time_ns()}"
    files = workload(
        "repeated",
        prompts=args.prompts,
        prefixes=args.prefixes,
        words=args.prefix_words,
        tag=tag,
        seed=args.seed,
    )
    runs = []
    with servers(args, 1) as (urls, model):
        for label, cache in (
            ("first run, cache", True),
            ("run again, cache", True),
            ("run again, no cache", False),
        ):
            options = {"cache": str(work / "cache")} if cache else {}
            q = query(urls, model, prefixOrder="false", **options)
            runs.append({"run": label, **run_files(files, q)})
    on, off = runs[1], runs[2]
    return {
        "workload": "(c) same prompts again",
        "option": "cache",
        "endpoints": 1,
        "cache_blocks": None if args.endpoint else args.cache_blocks,
        "runs": runs,
        "ratio": {
            key: round(on[key] / off[key], 3) if off[key] else None
            for key in ("requests", "computed_tokens", "seconds")
        },
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['date']}, {result['machine']}: `{result['command']}`. {result['server']}. "
        f"{result['prompts']} prompts a workload in 4 files (one partition each, sent one "
        "after another in process: the pipeline's fetch, Spark's start left out), maxTokens 32, "
        "temperature 0, maxConcurrency 32.",
        "",
        "| workload | option | value | endpoints | KV blocks | distinct requests | requests sent "
        "| prompt tokens | cached | computed | seconds |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for block in result["workloads"]:
        for run in block["runs"]:
            value = run.get(block.get("option", ""), run.get("run"))
            lines.append(
                f"| {block['workload']} | {block.get('option', 'cache')} | {value} | "
                f"{block.get('endpoints', 1)} | {block.get('cache_blocks') or '-'} | "
                f"{run['distinct']:,} | {run['requests']:,} | {run['prompt_tokens']:,} | "
                f"{run['cached_tokens']:,} | {run['computed_tokens']:,} | {run['seconds']:.2f} |"
            )
        if "ratio" in block:
            r = block["ratio"]
            lines.append(
                f"| {block['workload']} | on / off | | | | | {r['requests']} | | | "
                f"{r['computed_tokens']} | {r['seconds']} |"
            )
    for note in result["not_run"]:
        lines.append(f"\nNot run: {note}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="a real vLLM's base URL (default: the simulator)")
    parser.add_argument("--prompts", type=int, default=960)
    parser.add_argument("--prefixes", type=int, default=8)
    parser.add_argument("--prefix-words", type=int, default=1100)
    parser.add_argument("--cache-blocks", type=int, default=200, help="simulator: KV blocks")
    parser.add_argument("--prefill-ms", type=float, default=0.05, help="simulator: per token")
    parser.add_argument("--decode-ms", type=float, default=4.0, help="simulator: per token")
    parser.add_argument("--max-seqs", type=int, default=16, help="simulator: sequences at once")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.smoke:
        args = replace_args(
            args,
            prompts=48,
            prefixes=4,
            prefix_words=300,
            cache_blocks=50,
            prefill_ms=0.05,
            decode_ms=0.1,
        )
    work = Path(tempfile.mkdtemp(prefix="dspark-model-time-"))
    blocks, not_run = [], []
    try:
        warm_up(args)
        if _has_option("dedupe"):
            blocks.append(
                side_by_side(args, "(a) a third repeated", "repeated", "dedupe", ("auto", "off"))
            )
        else:
            not_run.append("(a) needs option dedupe (branch issue-33a).")
        blocks.append(
            side_by_side(
                args, "(b) long shared prefixes", "prefixes", "prefixOrder", ("true", "false")
            )
        )
        if not args.endpoint:
            blocks.append(
                side_by_side(
                    args,
                    "(b) long shared prefixes",
                    "prefixes",
                    "prefixOrder",
                    ("true", "false"),
                    endpoints=2,
                )
            )
            roomy = replace_args(args, cache_blocks=args.cache_blocks * 50)
            blocks.append(
                side_by_side(
                    roomy,
                    "(b) KV space for every prefix",
                    "prefixes",
                    "prefixOrder",
                    ("true", "false"),
                )
            )
        blocks.append(
            side_by_side(
                args, "(b) control: nothing shared", "distinct", "prefixOrder", ("true", "false")
            )
        )
        if _has_option("cache"):
            blocks.append(rerun_with_cache(args, work))
        else:
            not_run.append("(c) needs option cache (branch issue-33a).")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.endpoint:
        server = f"Real server at {args.endpoint}"
    else:
        server = (
            f"Simulator: {args.cache_blocks} KV blocks of 16 tokens, prefill {args.prefill_ms} "
            f"ms per uncached token, decode {args.decode_ms} ms per output token, "
            f"{args.max_seqs} sequences at once; {args.prefixes} prefixes of "
            f"{args.prefix_words} words"
        )
    command = "benchmarks/model_time.py" + " ".join(["", *sys.argv[1:]])
    result = {
        "date": datetime.now(UTC).date().isoformat(),
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "command": command,
        "server": server,
        "prompts": args.prompts,
        "workloads": blocks,
        "not_run": not_run,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_time.json").write_text(json.dumps(result, indent=2) + "\n")
    text_md = markdown(result)
    (args.out / "model_time.md").write_text(text_md)
    sys.stdout.write(text_md)


def warm_up(args: argparse.Namespace) -> None:
    """A few requests first, not measured: the process's first fetch loads what it imports."""
    files = workload(
        "distinct", prompts=8, prefixes=1, words=10, tag=f"warm-{time.time_ns()}", seed=0
    )
    with servers(args, 1) as (urls, model):
        run_files(files, query(urls, model))


def replace_args(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


if __name__ == "__main__":
    main()
