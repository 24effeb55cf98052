"""A fresh process with an empty numba cache: the first small batch is answered at once (by the
reference parser) while the kernels compile in the background; a large one waits for them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from dspark_json.parse import warmup

SCRIPT = textwrap.dedent(
    """
    import json, time
    import dspark_json
    from dspark_json.parse import warmup
    from dspark_json.parse.cpu import warm_kernels
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"a": 1, "b": 2}'},
        "finish_reason": "stop"}], "system_fingerprint": "fp"})
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    started = time.perf_counter()
    small = dspark_json.parse_responses([body] * 300, response_format=schema, backend="cpu")
    first = time.perf_counter() - started
    warmed = warmup.ready()
    warmup.wait(warm_kernels)
    again = dspark_json.parse_responses([body] * 300, response_format=schema, backend="cpu")
    print(json.dumps({"first_s": first, "ready_at_first": warmed,
        "same": small.equals(again), "rows": small.num_rows,
        "rescued": small.column("_rescued_data")[0].as_py()}))
    """
)


@pytest.mark.timeout(330)  # a cold compile of every kernel: 75 s of CPU, 110 s on a busy VM
def test_a_cold_process_answers_small_batches_without_waiting_for_the_compiler(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == 300 and result["same"] and result["rescued"] == '{"parsed.b":2}'
    assert result["ready_at_first"] is False  # the kernels were still compiling


EXITING = textwrap.dedent(
    """
    import sys, time
    from dspark_json.parse import warmup
    def job():
        time.sleep(1.5)  # as a compile still running when the main thread ends
        open(sys.argv[1], "w").write("done")
    warmup.start(job)
    """
)


def test_a_process_that_ends_while_the_kernels_compile_waits_for_them(tmp_path):
    # A daemon thread cut off inside LLVM at interpreter exit can abort the process (exit 134)
    # after its work is done: the warm-up is joined at exit, so the job runs to its end.
    marker = tmp_path / "finished"
    done = subprocess.run(
        [sys.executable, "-c", EXITING, str(marker)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert marker.read_text() == "done"


def test_the_drift_check_of_a_small_batch_does_not_wait_for_the_compiler(monkeypatch):
    """While the kernels compile in the background, a small batch's drift keys are read by
    Python's json: a compiled call would wait for the compiler (the first 300 bodies of a cold
    process took 24 s so). The keys are those the kernel reads."""
    from dspark_json.parse import drift

    rescued = pa.array(
        ['{"a": 1, "b": {"c": 2}}', None, '{"b":3,"x\\"y":4,"model_extra":1}', " ", "{}"]
    )
    monkeypatch.setattr(warmup, "ready", lambda: True)
    warm = drift.new_fields(rescued)
    assert warm >= {"a", "b", 'x"y'}

    def compiled(_: object) -> list[str]:
        raise AssertionError("the kernel ran while the kernels compile")

    monkeypatch.setattr(warmup, "ready", lambda: False)
    monkeypatch.setattr(drift, "rescued_keys", compiled)
    assert drift.new_fields(rescued) == warm
