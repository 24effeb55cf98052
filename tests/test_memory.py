"""dspark_json.memory: freed buffers stay in the process (glibc), so the next batch does not
fault in fresh pages; DSPARK_JSON_KEEP_MEMORY=0 leaves malloc as it is."""

import json
import os
import subprocess
import sys

import pytest

from dspark_json.memory import KEEP_MEMORY_ENV

#: In a fresh process: free a 100 MB buffer, allocate and fill one again, count page faults.
_PROBE = """
import json, resource
from dspark_json.memory import keep_freed_memory
raised = keep_freed_memory()
b"x" * 100_000_000  # allocated by malloc, touched, freed (numpy would ask for huge pages)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b"x" * 100_000_000
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"raised": raised, "faults": faults}))
"""


def _probe(keep: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != KEEP_MEMORY_ENV}
    if keep is not None:
        env[KEEP_MEMORY_ENV] = keep
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc only",
)
def test_a_freed_buffer_is_reused_without_faulting_its_pages_again():
    kept = _probe(None)
    assert kept["raised"] is True
    default = _probe("0")
    assert default["raised"] is False
    # 100 MB is ~24,000 pages of 4 KiB: faulted in again by default, reused when kept.
    assert default["faults"] > 20_000
    assert kept["faults"] < 2_000
