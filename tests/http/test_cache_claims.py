"""Claims between tasks running at once (option ``cache``, issue 47 item 5): a request another
task is sending waits for its answer, a failed owner's request is sent by a waiting task, a task
killed -9 or hung holds nobody back past its lease, a live owner past ``requestDeadline`` either;
claims are off on an object store (one INFO), hold no credential and leave nothing behind.

The other task is a real process (``_OTHER_TASK``) or a thread running the real send path; the
model server is a raw server on 127.0.0.1 that counts what it got."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dspark_json.http import claims as claims_module
from dspark_json.http.cache import ENTRY_SUFFIX, ResponseCache
from dspark_json.http.claims import CLAIM_SUFFIX, LEASE_FOLDER, LEASE_SUFFIX, Claims
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.reuse import ReuseOptions, send_once
from tests.helpers import home_like
from tests.http.conftest import request_body
from tests.raw_servers import RawServer, completion, raw_server, response

pytestmark = pytest.mark.usefixtures("no_proxy")  # tests/http/conftest.py

body = request_body


def prompt_of(raw: bytes) -> str:
    return json.loads(raw.partition(b"\r\n\r\n")[2])["messages"][0]["content"]


class Model:
    """A raw server's handler: after ``delay`` seconds, each prompt's answer (``failures``:
    the statuses its first requests get instead); counts the requests by prompt."""

    def __init__(self, delay: float = 0.0, failures: dict[str, list[int]] | None = None):
        self.delay, self.failures = delay, failures or {}
        self.asked: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, request) -> bytes:
        prompt = prompt_of(request.raw)
        with self._lock:
            self.asked[prompt] += 1
            failing = self.failures.get(prompt) or []
            status = failing.pop(0) if failing else 200
        time.sleep(self.delay)
        if status != 200:
            return response(status, {"error": {"message": "overloaded", "type": "x"}})
        return response(200, completion(json.dumps({"answer": prompt})))

    @property
    def sent(self) -> int:
        return sum(self.asked.values())


def run(server: RawServer, cache: str, requests: list[bytes], *, deadline=30.0, **reuse):
    http = HttpOptions(
        endpoints=(Endpoint(server.url),),
        max_concurrency=4,
        max_attempts=1,
        request_deadline=deadline,
    )
    return send_once(
        requests,
        [True] * len(requests),
        http,
        ReuseOptions(cache=cache, **reuse),
        model="m",
    )


_OTHER_TASK = """
import json, sys, time
from dspark_json.http import claims as c
from dspark_json.http.cache import ResponseCache
from tests.raw_servers import completion
directory, request, then, lease = sys.argv[1], sys.argv[2].encode(), sys.argv[3], float(sys.argv[4])
c.LEASE_SECONDS, c.LEASE_RENEW_SECONDS = lease, lease / 5
cache = ResponseCache(directory, "m")
claims = c.Claims(cache)
with claims.leased():
    assert claims.claim(cache.key(request))
    print("claimed", flush=True)
    if then == "hold":
        time.sleep(3600)
    verb, seconds = then.split(":")
    time.sleep(float(seconds))
    if verb == "answer":
        cache.put(request, json.dumps(completion(json.dumps({"answer": "from the other task"}))))
    # verb "fail": its request failed: nothing written; the claim is released on the way out
print("done", flush=True)
"""


@contextmanager
def other_task(cache: Path, request: bytes, then: str, lease: float = 30.0) -> Iterator:
    """Another task, a process of its own, that claims ``request`` and then answers it
    (``answer:S``), fails it (``fail:S``) or holds it (``hold``)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _OTHER_TASK, str(cache), request.decode(), then, str(lease)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "claimed"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def leftovers(cache: Path) -> list[Path]:
    """Claims, leases and temporary files left in the cache."""
    return [
        p
        for p in cache.rglob("*")
        if (p.is_file() and not p.name.endswith(ENTRY_SUFFIX)) or p.name.startswith(".")
    ]


def test_a_request_another_task_is_sending_waits_for_its_answer(tmp_path, caplog):
    model = Model()
    with (
        raw_server(model) as server,
        other_task(tmp_path, body("a"), "answer:1.0") as other,
        caplog.at_level(logging.INFO, logger="dspark_json"),
    ):
        started = time.monotonic()
        fetched = run(server, str(tmp_path), [body("a"), body("b")])
        took = time.monotonic() - started
        assert other.wait(10) == 0
    assert model.asked == {"b": 1}  # a came from the other task
    assert "from the other task" in fetched.outcomes[0].body
    assert fetched.outcomes[1].body is not None and '\\"b\\"' in fetched.outcomes[1].body
    assert took > 0.5  # it waited
    stats = fetched.stats
    assert (stats.cache_hits, stats.cache_misses, stats.cache_waits, stats.requests) == (1, 1, 1, 1)
    assert "1 request(s) another task was sending: 1 answered by it" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # no claim read
    assert leftovers(tmp_path) == []  # every claim released, every lease removed


def test_the_claim_is_there_while_the_request_is_sent_and_gone_after(tmp_path):
    cache = ResponseCache(str(tmp_path), "m")
    claim = tmp_path / cache.key(body("a"))[:2] / f"{cache.key(body('a'))}{CLAIM_SUFFIX}"
    seen: list[dict] = []
    leases: list[list[str]] = []

    def model(request):
        seen.append(json.loads(claim.read_text()))
        leases.append(sorted(p.name for p in (tmp_path / LEASE_FOLDER).iterdir()))
        return response(200, completion("{}"))

    with raw_server(model) as server:
        run(server, str(tmp_path), [body("a")])
    (owner,) = [s["owner"] for s in seen]
    assert set(seen[0]) == {"owner"} and owner.split("-")[-2] == str(os.getpid())
    assert leases == [[f"{owner}{LEASE_SUFFIX}"]]
    assert leftovers(tmp_path) == []  # the claim and the lease removed at the end


def test_a_lease_holds_only_an_expiry(tmp_path):
    cache = ResponseCache(str(tmp_path), "m")
    claims = Claims(cache)
    with claims.leased():
        (lease,) = (tmp_path / LEASE_FOLDER).iterdir()
        held = json.loads(lease.read_text())
        assert set(held) == {"expires"} and held["expires"] > time.time() + 20
    assert leftovers(tmp_path) == []


def test_a_failed_owners_request_is_sent_by_the_waiting_task(tmp_path, caplog):
    # Decided: a waiting task never takes the owner's error; it claims the request in turn and
    # sends it itself, so its rows hold their own answer (or their own error).
    model = Model()
    with (
        raw_server(model) as server,
        other_task(tmp_path, body("a"), "fail:0.5"),
        caplog.at_level(logging.INFO, logger="dspark_json"),
    ):
        fetched = run(server, str(tmp_path), [body("a")])
    assert model.asked == {"a": 1}
    assert fetched.outcomes[0].error is None and '\\"a\\"' in fetched.outcomes[0].body
    assert fetched.stats.cache_waits == 0 and fetched.stats.cache_misses == 1
    assert "1 to claim again" in caplog.text
    assert len(list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))) == 1  # this task's answer kept
    assert leftovers(tmp_path) == []


def test_two_tasks_at_once_one_fails_the_other_sends_for_itself(tmp_path):
    # Two tasks (threads, the real send path each) ask the same request at once; the first
    # request the server gets fails (HTTP 503, no retry). The task that sent it has its error;
    # the one that waited sends again and has an answer: never the other's error, silently.
    model = Model(delay=0.5, failures={"a": [503]})
    results: list = [None, None]
    with raw_server(model) as server:
        threads = [
            threading.Thread(
                target=lambda i=i: results.__setitem__(i, run(server, str(tmp_path), [body("a")]))
            )
            for i in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert model.asked == {"a": 2}
    statuses = sorted(
        (r.outcomes[0].error or {}).get("status", 200) for r in results if r is not None
    )
    assert statuses == [200, 503]
    assert leftovers(tmp_path) == []


def test_identical_requests_of_two_tasks_at_once_are_sent_once(tmp_path):
    model = Model(delay=0.2)
    requests = [body(f"p{i}") for i in range(20)]
    results: list = []
    with raw_server(model) as server:
        threads = [
            threading.Thread(
                target=lambda order=order: results.append(
                    run(server, str(tmp_path), requests[::order])
                )
            )
            for order in (1, -1)  # one from the first prompt, one from the last
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(results) == 2 and model.sent == 20 and set(model.asked.values()) == {1}
    assert sum(r.stats.requests for r in results) == 20
    assert sum(r.stats.cache_hits for r in results) == 20  # each answer once from the other
    assert all(o.body is not None and o.error is None for r in results for o in r.outcomes)
    assert leftovers(tmp_path) == []


def test_a_task_killed_9_holds_nobody_back(tmp_path):
    # Its lease would hold for 30 s, but its process is gone on this host: taken over at once.
    model = Model()
    with raw_server(model) as server, other_task(tmp_path, body("a"), "hold") as other:
        waiting: list = []
        thread = threading.Thread(
            target=lambda: waiting.append(run(server, str(tmp_path), [body("a")]))
        )
        thread.start()
        time.sleep(0.5)
        assert not waiting and model.sent == 0  # waits for the live task
        other.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        thread.join(15)
        took = time.monotonic() - killed
    assert waiting and model.asked == {"a": 1} and took < 5
    assert waiting[0].outcomes[0].error is None
    assert leftovers(tmp_path) == []  # its claim taken over and released, its lease removed


def test_a_hung_task_holds_nobody_back_past_its_lease(tmp_path):
    # A task that stops (SIGSTOP: a hung executor, or one on another host that died) stops
    # renewing its lease; its process still exists, so only the lease's expiry frees it.
    model = Model()
    with raw_server(model) as server, other_task(tmp_path, body("a"), "hold", lease=1.5) as other:
        other.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        fetched = run(server, str(tmp_path), [body("a")], deadline=20)  # not the deadline's
        took = time.monotonic() - started
        other.send_signal(signal.SIGKILL)
    assert model.asked == {"a": 1} and fetched.outcomes[0].error is None
    assert 0.3 < took < 10


def test_a_waiting_task_sends_itself_at_the_request_deadline(tmp_path, caplog):
    model = Model()
    with (
        raw_server(model) as server,
        other_task(tmp_path, body("a"), "hold"),  # alive, renewing, never answering
        caplog.at_level(logging.INFO, logger="dspark_json"),
    ):
        started = time.monotonic()
        fetched = run(server, str(tmp_path), [body("a")], deadline=1.5)
        took = time.monotonic() - started
    assert model.asked == {"a": 1} and fetched.outcomes[0].error is None
    assert 1.4 < took < 10
    assert "1 still claimed at requestDeadline=1.5s (sent here)" in caplog.text
    assert len(list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))) == 1


def test_a_dead_tasks_claims_are_taken_over_and_its_lease_removed(tmp_path):
    cache = ResponseCache(str(tmp_path), "m")
    leases = tmp_path / LEASE_FOLDER
    leases.mkdir()
    expired = leases / f"otherhost-7-0123456789ab{LEASE_SUFFIX}"
    expired.write_text(json.dumps({"expires": time.time() - 1}))
    owners = {
        body("a"): "somehost-1-0123456789ab",  # no lease at all
        body("b"): "otherhost-7-0123456789ab",  # a lease that expired
        body("c"): None,  # an unreadable claim, older than a lease
    }
    for request, owner in owners.items():
        claim = tmp_path / cache.key(request)[:2] / f"{cache.key(request)}{CLAIM_SUFFIX}"
        claim.parent.mkdir(parents=True, exist_ok=True)
        claim.write_text(json.dumps({"owner": owner}) if owner else "")
        os.utime(claim, (time.time() - 3600, time.time() - 3600))
    model = Model()
    with raw_server(model) as server:
        started = time.monotonic()
        fetched = run(server, str(tmp_path), list(owners))
    assert model.sent == 3 and time.monotonic() - started < 5
    assert fetched.stats.cache_misses == 3 and fetched.stats.cache_waits == 0
    assert leftovers(tmp_path) == []


def test_a_lease_left_by_a_killed_task_is_swept(tmp_path):
    leases = tmp_path / LEASE_FOLDER
    leases.mkdir()
    stale = leases / f"otherhost-9-0123456789ab{LEASE_SUFFIX}"
    stale.write_text(json.dumps({"expires": time.time() - 3600}))
    partial = leases / ".otherhost-9-0123456789ab.0011.tmp"
    partial.write_text("{")
    for path in (stale, partial):
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    live = leases / f"otherhost-8-0123456789ab{LEASE_SUFFIX}"
    live.write_text(json.dumps({"expires": time.time() + 600}))
    with raw_server(Model()) as server:
        run(server, str(tmp_path), [body("a")])
    assert sorted(p.name for p in leases.iterdir()) == [live.name]


def test_rows_of_one_task_with_the_same_body_do_not_wait_on_each_other(tmp_path):
    model = Model()
    with raw_server(model) as server:
        started = time.monotonic()
        fetched = run(server, str(tmp_path), [body("a"), body("a")], dedupe="off")
    assert model.asked == {"a": 2} and time.monotonic() - started < 5  # dedupe=off: each sent
    assert fetched.stats.cache_waits == 0


def test_claims_are_off_on_an_object_store_with_one_info(tmp_path, caplog):
    directory = f"mock://user:canary-secret@bucket/{tmp_path.name}/cache"
    model = Model()
    with raw_server(model) as server, caplog.at_level(logging.INFO, logger="dspark_json"):
        first = run(server, directory, [body("a"), body("b")])
        second = run(server, directory, [body("a")])
    assert model.sent == 3  # as without claims (the mock store keeps nothing between reads)
    assert all(o.error is None for r in (first, second) for o in r.outcomes)
    said = [r.getMessage() for r in caplog.records if "no claims between tasks" in r.getMessage()]
    assert len(said) == 1 and "has no create-if-absent" in said[0]
    assert "canary-secret" not in caplog.text


def test_a_cache_whose_lease_cannot_be_written_sends_as_without_claims(tmp_path, caplog):
    (tmp_path / LEASE_FOLDER).write_text("a file where the leases' folder goes")
    model = Model()
    with raw_server(model) as server, caplog.at_level(logging.INFO, logger="dspark_json"):
        fetched = run(server, str(tmp_path), [body("a")])
    assert model.sent == 1 and fetched.outcomes[0].error is None
    assert "no claims between tasks, its lease cannot be written" in caplog.text
    assert not list(tmp_path.rglob(f"*{CLAIM_SUFFIX}"))


def test_the_lease_is_renewed_while_the_task_sends(tmp_path, monkeypatch):
    monkeypatch.setattr(claims_module, "LEASE_SECONDS", 1.0)
    monkeypatch.setattr(claims_module, "LEASE_RENEW_SECONDS", 0.2)
    claims = Claims(ResponseCache(str(tmp_path), "m"))
    with claims.leased():
        (lease,) = (tmp_path / LEASE_FOLDER).iterdir()
        first = json.loads(lease.read_text())["expires"]
        time.sleep(1.5)  # past the first expiry
        assert json.loads(lease.read_text())["expires"] > first + 1
        assert claims._alive(claims.owner, {})
        other = Claims(ResponseCache(str(tmp_path), "m"))
        assert other._alive(claims.owner, {})


def test_an_answer_written_between_the_lookup_and_the_claim_is_not_asked_again(
    tmp_path, monkeypatch
):
    # The other task wrote its answer and released its claim after this task looked the
    # request up and before it claimed it: the look after the claim finds the entry.
    original = ResponseCache.get_many
    calls: list[int] = []

    def lookup_then_other_task_answers(self, requests):
        found = original(self, requests)
        if not calls:
            for request in requests:
                self.put(request, json.dumps(completion('{"answer": "from the other task"}')))
        calls.append(len(requests))
        return found

    monkeypatch.setattr(ResponseCache, "get_many", lookup_then_other_task_answers)
    model = Model()
    with raw_server(model) as server:
        fetched = run(server, str(tmp_path), [body("a"), body("b")])
    assert model.sent == 0 and calls == [2, 2]
    assert all("from the other task" in o.body for o in fetched.outcomes)
    assert (fetched.stats.cache_hits, fetched.stats.cache_misses) == (2, 0)
    assert leftovers(tmp_path) == []


def test_a_corrupt_entry_another_task_is_replacing_is_waited_for(tmp_path, caplog):
    cache = ResponseCache(str(tmp_path), "m")
    entry = tmp_path / cache.key(body("a"))[:2] / f"{cache.key(body('a'))}{ENTRY_SUFFIX}"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"not an entry")
    model = Model()
    with (
        raw_server(model) as server,
        other_task(tmp_path, body("a"), "answer:1.0"),
        caplog.at_level(logging.WARNING, logger="dspark_json"),
    ):
        fetched = run(server, str(tmp_path), [body("a")])
    assert model.sent == 0 and "from the other task" in fetched.outcomes[0].body
    assert fetched.stats.cache_waits == 1
    assert caplog.text.count("is not used") == 1  # the lookup's WARN, not one per look


# Issue 53: claims and leases that others wrote (a shared cache on NFS or a workspace mount).


def claim_file(cache_dir: Path, request: bytes) -> Path:
    key = ResponseCache(str(cache_dir), "m").key(request)
    path = cache_dir / key[:2] / f"{key}{CLAIM_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.timeout(60)
def test_a_fifo_lease_or_claim_blocks_no_task(tmp_path, caplog):
    """A FIFO named like a lease (the sweep and every claim's owner check read it) and a FIFO
    where a claim should be: opening either for reading blocked each task for ever."""
    leases = tmp_path / LEASE_FOLDER
    leases.mkdir()
    os.mkfifo(leases / f"otherhost-7-0123456789ab{LEASE_SUFFIX}")
    claim_file(tmp_path, body("a")).write_text(json.dumps({"owner": "otherhost-7-0123456789ab"}))
    os.mkfifo(claim_file(tmp_path, body("b")))
    model = Model()
    with raw_server(model) as server, caplog.at_level(logging.WARNING, logger="dspark_json"):
        fetched = run(server, str(tmp_path), [body("a"), body("b")], deadline=5.0)
    assert all(o.error is None for o in fetched.outcomes) and model.sent == 2
    assert fetched.stats.cache_waits == 0
    assert "is not a regular file (a FIFO); removed" in caplog.text


def test_a_symlinked_claims_folder_deletes_nothing_where_it_points(tmp_path, caplog):
    """A ``_claims`` that is a symbolic link: every task's sweep deleted the dotfiles and the
    ``*.lease`` files where it points (a home directory lost .bashrc). Refused with a WARN
    naming it; the rows are answered without claims."""
    home = tmp_path / "home"
    kept = home_like(home)
    assert kept[1].name.endswith(LEASE_SUFFIX)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / LEASE_FOLDER).symlink_to(home)
    model = Model()
    with raw_server(model) as server, caplog.at_level(logging.WARNING, logger="dspark_json"):
        fetched = run(server, str(cache), [body("a"), body("b")])
    assert all(p.exists() for p in kept) and sorted(p.name for p in home.iterdir()) == sorted(
        p.name for p in kept
    )
    assert all(o.error is None for o in fetched.outcomes) and model.sent == 2
    said = [r.getMessage() for r in caplog.records if "symbolic link" in r.getMessage()]
    assert len(said) == 1 and str(cache / LEASE_FOLDER) in said[0]


@pytest.mark.parametrize("forged", ["future-claim", "forged-lease"])
def test_a_claim_in_the_future_or_a_forged_lease_holds_nobody_for_the_deadline(
    tmp_path, forged, caplog
):
    """A claim written an hour in the future (unreadable, so judged by its age) or a lease that
    says it lives for ten days: each task waited a whole requestDeadline for it. A lease is
    believed for LEASE_SECONDS at most, a time in the future is not believed."""
    claim = claim_file(tmp_path, body("a"))
    if forged == "future-claim":
        claim.write_text("")
        os.utime(claim, (time.time() + 3600, time.time() + 3600))
    else:
        claim.write_text(json.dumps({"owner": "otherhost-7-0123456789ab"}))
        (tmp_path / LEASE_FOLDER).mkdir()
        lease = tmp_path / LEASE_FOLDER / f"otherhost-7-0123456789ab{LEASE_SUFFIX}"
        lease.write_text(json.dumps({"expires": time.time() + 864_000}))
    model = Model()
    with raw_server(model) as server, caplog.at_level(logging.INFO, logger="dspark_json"):
        fetched = run(server, str(tmp_path), [body("a")], deadline=3.0)
    assert fetched.outcomes[0].error is None and model.sent == 1
    assert "another task was sending" not in caplog.text  # taken over at once, not waited for
    assert "taken over" in caplog.text
