"""The micro-batcher: chains of many concurrent requests coalesced into `score_many` calls on one model thread.

RL trainers send one sample per request from many workers at once; scoring each alone leaves the device mostly
idle, so requests wait in a queue and one worker takes as many whole requests as fit in `max_chains` chains (a
request with many candidates counts as many chains, so it cannot hide a huge batch behind one slot), oldest first
in rounds, grouped by length within a round (see `_plan_round`). A partial batch waits at most `max_wait_s` after
its oldest request arrived; while a batch runs, the next one fills up, so under load the wait costs nothing.
`score_many` itself splits a call at the padded-token budget (`max_batch_tokens`), so no forward pass exceeds
either limit.

The model runs in a single thread: never two forward passes at once on one device, and the event loop keeps
accepting (and refusing) requests while a batch runs. A failure inside `score_many` (out of memory, say) fails
only the requests of that batch; the worker goes on with the next.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

from prmkit.serving.metrics import ServeMetrics

log = logging.getLogger("prmkit.serve")

Chain = tuple[str, list[str]]
ScoreMany = Callable[[Sequence[Chain]], list[list[float | None]]]
ROUND_BATCHES = 4  # batches planned at a time: more sorts better by length, fewer bounds how long a request waits


class Overloaded(Exception):
    """The queue holds `queue_limit` chains already: the client should retry later."""


class ShuttingDown(Exception):
    """The server is draining after SIGTERM and takes no new work."""


class BatchFailed(Exception):
    """`score_many` raised for the batch this request was in; the message is the error's."""


@dataclass
class Job:
    chains: list[Chain]
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)
    length: float = 0.0  # characters per chain: a cheap stand-in for tokens when grouping by length

    def __post_init__(self):
        self.length = sum(len(prompt) + sum(map(len, steps)) for prompt, steps in self.chains) / len(self.chains)


class MicroBatcher:
    def __init__(self, score_many: ScoreMany, *, max_chains: int, max_wait_s: float, queue_limit: int,
                 metrics: ServeMetrics, on_failure: Callable[[], None] = lambda: None):
        self.score_many = score_many
        self.max_chains = max_chains
        self.max_wait_s = max_wait_s
        self.queue_limit = queue_limit
        self.metrics = metrics
        self.on_failure = on_failure  # e.g. free cached GPU memory after an out-of-memory error
        self.pending: deque[Job] = deque()  # accepted, not yet planned into a round
        self._round: deque[list[Job]] = deque()  # the batches planned for the current round
        self.queued_chains = 0  # chains accepted and not yet handed to the model (pending + round)
        self.closing = False
        self.last_failure: str | None = None  # the error of the last failed model call, until a call succeeds
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def running(self) -> bool:
        return self._worker is not None and not self.closing

    def start(self) -> None:
        """Start the worker on the running event loop (the server's lifespan calls this)."""
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prmkit-model")
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="prmkit-batcher")

    async def close(self) -> None:
        """Take no new work, score everything already accepted, then stop the model thread."""
        self.closing = True
        if self._worker is None:
            return
        self._wakeup.set()
        await self._worker
        self._executor.shutdown(wait=True)

    async def submit(self, chains: list[Chain]) -> list[list[float | None]]:
        """Scores for these chains, in order, once a batch that holds them has run."""
        if self.closing or self._worker is None:
            raise ShuttingDown()
        if self.queued_chains + len(chains) > self.queue_limit:
            raise Overloaded()
        if not chains:
            return []
        job = Job(chains, asyncio.get_running_loop().create_future())
        self.pending.append(job)
        self._queued(len(chains))
        self._wakeup.set()
        return await job.future

    def _queued(self, change: int) -> None:
        self.queued_chains += change
        self.metrics.queue_chains.set(self.queued_chains)

    async def _run(self) -> None:
        while self.pending or self._round or not self.closing:
            if not self._round:
                if not self.pending:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                await self._fill()
                self._plan_round()
            jobs = self._next_batch()
            if jobs:
                await self._score(jobs)

    async def _fill(self) -> None:
        """Wait until a full batch is queued, or max_wait_s after the oldest request arrived, or shutdown."""
        deadline = self.pending[0].arrived + self.max_wait_s
        while self.queued_chains < self.max_chains and not self.closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _plan_round(self) -> None:
        """Take the oldest requests, up to ROUND_BATCHES batches' worth (always at least one request), sort them by
        length (characters per chain) and cut them into batches of at most max_chains chains, as score_many does
        with its own input: similar lengths share a batch, so little is padded. Requests that arrive meanwhile
        wait for the next round, so none is passed over for more than one round."""
        budget = ROUND_BATCHES * self.max_chains
        jobs: list[Job] = []
        taken = 0
        while self.pending and (not jobs or taken + len(self.pending[0].chains) <= budget):
            job = self.pending.popleft()
            jobs.append(job)
            taken += len(job.chains)
        batch: list[Job] = []
        size = 0
        for job in sorted(jobs, key=lambda job: job.length):
            if batch and size + len(job.chains) > self.max_chains:
                self._round.append(batch)
                batch, size = [], 0
            batch.append(job)
            size += len(job.chains)
        self._round.append(batch)

    def _next_batch(self) -> list[Job]:
        """The round's next batch, less requests whose client went away (they are dropped unscored)."""
        batch = self._round.popleft()
        self._queued(-sum(len(job.chains) for job in batch))
        gone = sum(len(job.chains) for job in batch if job.future.done())
        if gone:
            self.metrics.dropped_chains.inc(gone)
        return [job for job in batch if not job.future.done()]

    async def _score(self, jobs: list[Job]) -> None:
        chains = [chain for job in jobs for chain in job.chains]
        start = time.monotonic()
        try:
            scores = await asyncio.get_running_loop().run_in_executor(self._executor, self.score_many, chains)
        except Exception as err:  # noqa: BLE001 - any failure of the model fails this batch, not the server
            log.error("a batch of %d chains failed: %s: %s", len(chains), type(err).__name__, err)
            self.last_failure = f"{type(err).__name__}: {err}"
            self.on_failure()
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(BatchFailed(f"{type(err).__name__}: {err}"))
            return
        self.last_failure = None
        self.metrics.batch(len(chains), time.monotonic() - start)
        cursor = 0
        for job in jobs:
            if not job.future.done():
                job.future.set_result(scores[cursor:cursor + len(job.chains)])
            cursor += len(job.chains)
