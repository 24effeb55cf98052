"""Answers reused instead of asked again: identical requests once (option ``dedupe``,
:mod:`.dedup`) and the response cache across runs (option ``cache``, :mod:`.cache`).

:func:`send_once` stands before the client (:func:`~dspark_json.http.client.complete_all`):
it groups a partition's rows by request body, answers what the cache holds, sends each
remaining distinct request once (a request another task is sending at the same time waits for
its answer instead: :mod:`.claims`), writes the new answers to the cache, and gives every row its
answer, in order: rows out = prompts in, each with its own ``custom_id`` and prompt columns.
The journal still holds one answer per row, so a replay needs neither the server nor the
cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from dspark_json.http.cache import ResponseCache
from dspark_json.http.claims import Claims
from dspark_json.http.dedup import DEDUPE_MODES, Dedupe, group
from dspark_json.http.options import HttpOptions
from dspark_json.option_spec import choice, directory, option
from dspark_json.records import ClientStats, Fetched, Outcome, Outcomes
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = ["CACHE_MODES", "CacheMode", "ReuseOptions", "send_once"]

logger = logging.getLogger("dspark_json")

CacheMode = Literal["deterministic", "all"]
#: Option ``cacheMode``'s values.
CACHE_MODES: dict[str, CacheMode] = {"deterministic": "deterministic", "all": "all"}


@dataclass(frozen=True, kw_only=True)
class ReuseOptions:
    """Which answers are reused instead of asked again."""

    dedupe: Dedupe = option(
        "dedupe",
        "Identical requests once: within a task, rows whose request bodies are byte-identical "
        "are sent once and each row gets the answer (with its own custom_id and prompt "
        "columns). auto: only deterministic requests (temperature 0, or a seed); force: every "
        "identical request, sampled ones too (the rows then share one sample); off: each row "
        "its own request.",
        "off",
        convert=choice(DEDUPE_MODES),
        default="auto",
    )
    cache: str | None = option(
        "cache",
        "Directory (path or URI) of a response cache shared by runs and queries: an HTTP 200 "
        "chat completion is kept under sha256(model, request body) (not the endpoint: replicas "
        "share answers), and a request found there is not sent; on a local or mounted "
        "filesystem a request another task is sending at the same time waits for its answer "
        "(a claim next to the entry). An entry that is corrupt, over "
        "the limits or not a regular file is asked again (WARN). An object store's endpoint and "
        "credentials go in option storageOptions. "
        "Nothing expires by itself: delete entries by age (docs/guide/dedupe-and-cache.md). "
        "Default: no cache.",
        "/data/_cache/answers",
        convert=directory,  # a query string refused, as for every directory
    )
    cache_mode: CacheMode = option(
        "cacheMode",
        "Which requests the cache keeps and answers: deterministic (temperature 0, or a seed) "
        "or all (sampled ones too: a re-run gets the sample of the first run).",
        "all",
        convert=choice(CACHE_MODES),
        default="deterministic",
    )


def send_once(
    requests: Sequence[bytes | None],
    deterministic: Sequence[bool],
    http: HttpOptions,
    reuse: ReuseOptions,
    *,
    model: str | None,
    stop_on_failure: bool = False,
    send: Callable[[list[bytes | None]], Fetched] | None = None,
    storage: StorageSettings = ENVIRONMENT_ONLY,
) -> Fetched:
    """Answer each request (``None``: not sent), in order, asking the server only for the
    distinct requests the cache does not hold.

    Parameters
    ----------
    requests:
        Each row's request body; ``None`` where the row is not sent.
    deterministic:
        Whether each request gets the same answer every time
        (:func:`~dspark_json.http.dedup.is_deterministic`).
    http:
        How to send.
    reuse:
        Options ``dedupe``, ``cache``, ``cacheMode``.
    model:
        The model the driver settled: part of each cache key.
    stop_on_failure:
        FAILFAST: no new request after the first that fails for good.
    storage:
        How the cache's store is reached (option ``storageOptions``).
    send:
        Sends request bodies (default :func:`~dspark_json.http.client.complete_all`).
    """
    from dspark_json.http.client import complete_all  # httpx: not where options are parsed

    sender = send or (lambda bodies: complete_all(bodies, http, stop_on_failure=stop_on_failure))
    groups = group(requests, deterministic, reuse.dedupe)
    cache = (
        ResponseCache(reuse.cache, model, max_bytes=http.max_response_bytes, storage=storage)
        if reuse.cache is not None
        else None
    )
    if cache is None and len(groups.leaders) == sum(r is not None for r in requests):
        return sender(list(requests))  # nothing to reuse: the client as it is

    def cached(row: int) -> bool:
        return cache is not None and (reuse.cache_mode == "all" or deterministic[row])

    answers: dict[int, Outcome] = {}
    looked = [row for row in groups.leaders if cached(row)]
    if cache is not None and looked:
        found = cache.get_many([_sent(requests[row]) for row in looked])
        answers.update((row, Outcome(body=b)) for row, b in zip(looked, found, strict=True) if b)
    missed = [row for row in looked if row not in answers]
    plain = [row for row in groups.leaders if not cached(row)]  # never in the cache
    if cache is None or not missed:
        stats, waits, sent = _ask(sender, requests, plain, answers), 0, set(plain)
    else:
        stats, waits, sent = _claimed(
            cache,
            sender,
            requests,
            answers,
            missed=missed,
            plain=plain,
            deadline_s=http.request_deadline,
        )
    outcomes = [Outcome() if lead < 0 else answers[lead] for lead in groups.leader_of]
    hits = sum(1 for row in looked if row not in sent)
    stats = replace(
        stats,
        failed=sum(1 for o in outcomes if o.error is not None),
        deduplicated=groups.followers,
        cache_hits=hits,
        cache_misses=len(looked) - hits,
        cache_waits=waits,
    )
    if groups.followers or looked:
        logger.info(
            "%d request(s) for %d row(s): %d sent, %d row(s) answered by an identical "
            "request, %d from the cache (%d looked up, %d of them after waiting for "
            "another task)",
            len(groups.leaders),
            len(outcomes) - groups.leader_of.count(-1),
            len(sent),
            groups.followers,
            hits,
            len(looked),
            waits,
        )
    return Fetched(outcomes=Outcomes.of(outcomes), stats=stats)


def _claimed(
    cache: ResponseCache,
    sender: Callable[[list[bytes | None]], Fetched],
    requests: Sequence[bytes | None],
    answers: dict[int, Outcome],
    *,
    missed: Sequence[int],
    plain: Sequence[int],
    deadline_s: float,
) -> tuple[ClientStats, int, set[int]]:
    """Send the cacheable requests the cache did not hold (``missed``) under claims
    (:mod:`.claims`), and the others (``plain``) as they are: what the client did, the rows
    answered by waiting for another task, and the rows sent.

    Each round claims what is pending, sends what it claimed (after a last look at the cache:
    an entry written since the lookup answers it), writes the answers and releases the claims,
    then waits for the requests other tasks hold. A request whose owner released it without an
    answer (its request failed) or died is claimed again in the next round: one of the waiting
    tasks sends it, each row gets its own answer or error. At ``requestDeadline`` a request
    still claimed by a live task is sent here without a claim."""
    keys = {row: cache.key(_sent(requests[row])) for row in missed}
    stats, waits, sent = ClientStats(), 0, set[int]()
    deadline = time.monotonic() + deadline_s
    claims = Claims(cache)
    with claims.leased():
        pending, others = list(missed), list(plain)
        while pending or others:
            mine = [row for row in pending if claims.claim(keys[row])]
            if claims.available:  # an entry written since the lookup (its claim released)
                fresh = [row for row in mine if keys[row] not in cache.refused]
                found = cache.get_many([_sent(requests[row]) for row in fresh])
                for row, body in zip(fresh, found, strict=True):
                    if body is not None:
                        answers[row] = Outcome(body=body)
                claims.release([keys[row] for row in fresh if row in answers])
            asked = [row for row in mine if row not in answers] + others
            stats = stats.then(_ask(sender, requests, asked, answers))
            sent.update(asked)
            _keep(cache, requests, answers, [row for row in asked if row in keys])
            claims.release([keys[row] for row in asked if row in keys])
            theirs: dict[str, list[int]] = {}
            for row in pending:
                if row not in answers:
                    theirs.setdefault(keys[row], []).append(row)
            pending, others = [], []
            if not theirs:
                break
            started = time.monotonic()
            waited = claims.wait(list(theirs), deadline)
            for key, body in waited.answers.items():
                for row in theirs[key]:
                    answers[row] = Outcome(body=body)
                    waits += 1
            pending = [row for key in waited.freed for row in theirs[key]]
            late = [row for key in waited.late for row in theirs[key]]
            logger.info(
                "cache %s: %d request(s) another task was sending: %d answered by it after "
                "%.1fs, %d to claim again (its request failed, or its task is gone), %d still "
                "claimed at requestDeadline=%gs (sent here)",
                cache,
                len(theirs),
                len(waited.answers),
                time.monotonic() - started,
                len(waited.freed),
                len(waited.late),
                deadline_s,
            )
            if late:  # the owner lives but has not answered in time: sent here, unclaimed
                stats = stats.then(_ask(sender, requests, late, answers))
                sent.update(late)
                _keep(cache, requests, answers, late)
    return stats, waits, sent


def _ask(
    sender: Callable[[list[bytes | None]], Fetched],
    requests: Sequence[bytes | None],
    rows: Sequence[int],
    answers: dict[int, Outcome],
) -> ClientStats:
    """Send ``rows``' requests; their outcomes into ``answers``; what the client did."""
    if not rows:
        return ClientStats()
    fetched = sender([requests[row] for row in rows])
    answers.update(zip(rows, fetched.outcomes, strict=True))  # one pass over the bodies
    return fetched.stats


def _keep(
    cache: ResponseCache,
    requests: Sequence[bytes | None],
    answers: dict[int, Outcome],
    rows: Sequence[int],
) -> None:
    """Write the answers of ``rows`` that the cache keeps: HTTP 200 only (an error or a body
    that is not UTF-8 is never kept), and of those only a chat completion
    (:meth:`~dspark_json.http.cache.ResponseCache.put`: never a gateway's error page)."""
    cache.put_many(
        [
            (_sent(requests[row]), body)
            for row in rows
            if (body := answers[row].body) is not None and answers[row].error is None
        ]
    )


def _sent(request: bytes | None) -> bytes:
    assert request is not None  # leaders are rows that are sent
    return request
