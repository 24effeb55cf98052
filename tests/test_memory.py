"""dspark_json.memory: freed buffers stay in the process (glibc), so the next batch does not
fault in fresh pages, only where the deployer asks (DSPARK_JSON_KEEP_MEMORY=1, or an explicit
call); importing the package and running a partition leave malloc as it is by default."""

import json
import os
import subprocess
import sys

import pytest

from dspark_json.memory import KEEP_MEMORY_ENV

#: In a fresh process: the package imported, then the CPU parser's vectorised path built (where
#: the environment is read, as at a partition's start), or the explicit call; free a 100 MB
#: buffer, allocate and fill one again, count page faults.
_PROBE = """
import json, resource, sys
import dspark_json, dspark_json.pipeline  # importing changes nothing
from dspark_json.memory import keep_freed_memory
from dspark_json.parse.vectorised import Vectorised
if sys.argv[1] == "call":
    raised = keep_freed_memory()
else:
    Vectorised(dspark_json.response_schema())
    raised = keep_freed_memory.cache_info().currsize > 0  # called (by the parser), and raised
    raised = raised and keep_freed_memory()
b"x" * 100_000_000  # allocated by malloc, touched, freed (numpy would ask for huge pages)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b"x" * 100_000_000
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"raised": raised, "faults": faults}))
"""


def _probe(keep: str | None, how: str = "env") -> dict:
    env = {k: v for k, v in os.environ.items() if k != KEEP_MEMORY_ENV}
    if keep is not None:
        env[KEEP_MEMORY_ENV] = keep
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, how], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc only",
)


@glibc_only
def test_malloc_is_left_as_it_is_unless_the_deployer_asks():
    # 100 MB is ~24,000 pages of 4 KiB: faulted in again by default, reused when kept.
    default = _probe(None)
    assert default == {"raised": False, "faults": default["faults"]}
    assert default["faults"] > 20_000
    off = _probe("0")
    assert off["raised"] is False and off["faults"] > 20_000


@glibc_only
def test_the_environment_variable_keeps_freed_buffers_without_faulting_their_pages_again():
    kept = _probe("1")
    assert kept["raised"] is True
    assert kept["faults"] < 2_000


@glibc_only
def test_an_explicit_call_keeps_freed_buffers_whatever_the_environment_says():
    kept = _probe(None, how="call")
    assert kept["raised"] is True
    assert kept["faults"] < 2_000


def test_an_unknown_value_is_named_with_its_fix_and_changes_nothing(caplog, monkeypatch):
    from dspark_json import memory

    monkeypatch.setenv(KEEP_MEMORY_ENV, "maybe")
    memory.keep_freed_memory_if_asked.cache_clear()
    try:
        assert memory.keep_freed_memory_if_asked() is False
    finally:
        memory.keep_freed_memory_if_asked.cache_clear()
    (record,) = [r for r in caplog.records if KEEP_MEMORY_ENV in r.getMessage()]
    assert "'maybe'" in record.getMessage() and "Set it to 1" in record.getMessage()
