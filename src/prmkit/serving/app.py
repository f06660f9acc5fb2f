"""The FastAPI app of `prmkit serve`: authentication, bounded bodies, the endpoints, and error answers.

Every request goes the same way: token check, body read up to `max_body_bytes`, parse and validate (wire.py), then
the chains join the micro-batcher's queue and the answer is shaped from their scores. Anything refused is a JSON
error `{"error": {"kind", "field", "message"}}` with a 4xx status (503 + Retry-After when the queue is full or a
batch failed), never a traceback; 4xx only for a malformed request: a chain over the size limits is scored as far
as it goes and answered as truncated, so one runaway sample never fails an RL trainer's batch. A request whose
client went away while it waited is dropped before it reaches the model. `/health` answers 200 only while the
model is loaded, requests are taken and the model can score (after a failed batch it probes the model first);
after SIGTERM it answers 503 "draining", so a load balancer stops sending work while accepted requests finish.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import time
from contextlib import asynccontextmanager
from typing import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from prmkit.scoring.scorer import PRMScorer
from prmkit.serving import wire
from prmkit.serving.batcher import BatchFailed, MicroBatcher, Overloaded, ShuttingDown
from prmkit.serving.metrics import ServeMetrics
from prmkit.serving.options import ServeOptions
from prmkit.serving.wire import Reader, WireError

log = logging.getLogger("prmkit.serve")

RETRY_AFTER_S = "1"
CLIENT_GONE = 499  # nginx's code for a request whose client closed the connection; nobody reads this answer
HEALTH_PROBE = ("1 + 1 = ?", ["1 + 1 = 2."])
HEALTH_PROBE_TIMEOUT_S = 10.0


def create_app(scorer: PRMScorer, options: ServeOptions, *, token: str | None = None,
               model_name: str = "prmkit") -> FastAPI:
    """A server for a loaded scorer; `token`, when given, must come as `Authorization: Bearer <token>` on every
    endpoint but /health. Chains per model call = the scorer's batch_size; padded tokens per forward pass = its
    max_batch_tokens."""
    metrics = ServeMetrics()
    batcher = MicroBatcher(_counted_scores(scorer, metrics), max_chains=scorer.batch_size,
                           max_wait_s=options.max_wait_ms / 1000, queue_limit=options.queue_limit, metrics=metrics,
                           on_failure=_free_cache(scorer))
    reader = Reader(options, scorer.metadata.separator)
    tokenizer = scorer.tokenizer
    end_tokens = tuple(t for t in {tokenizer.eos_token, tokenizer.pad_token} if isinstance(t, str) and t)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await batcher.close()  # uvicorn calls this once accepted connections are answered; drain what is queued

    app = FastAPI(title="prmkit serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    async def answer(request: Request, endpoint: str, score: Callable[[dict], Awaitable[dict]]) -> Response:
        start = time.monotonic()
        kind = None
        try:
            check_token(request, token)
            body = wire.parse_json(await read_body(request, options.max_body_bytes))
            response = JSONResponse(finite_json(await unless_client_leaves(request, score(body))))
        except (WireError, Overloaded, BatchFailed, ShuttingDown) as caught:
            err = refusal(caught, batcher.queued_chains, options.queue_limit)
            kind, response = err.kind, error_response(err)
        except ClientGone:
            kind, response = "client_gone", Response(status_code=CLIENT_GONE)
        metrics.answered(endpoint, response.status_code, time.monotonic() - start, kind)
        return response

    async def scores(chains: list[wire.Chain]) -> list[list[float | None]]:
        """Scores of whole chains: the model reads each as far as the size limits allow; the steps past them
        are None, as steps past max_length are."""
        bounded, cut = reader.bound(chains)
        return [s + [None] * n for s, n in zip(await batcher.submit(bounded), cut)]

    @app.post("/v1/score")
    async def v1_score(request: Request) -> Response:
        async def score(body: dict) -> dict:
            parsed = wire.read_score(body, reader)
            return wire.score_answer(parsed, await scores(parsed.chains))
        return await answer(request, "/v1/score", score)

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Response:
        async def score(body: dict) -> dict:
            return wire.reward_answer(await scores(wire.read_reward(body, reader, end_tokens)), options)
        return await answer(request, "/get_reward", score)

    @app.post("/classify")
    async def classify(request: Request) -> Response:
        async def score(body: dict) -> dict:
            chains = wire.read_classify(body, reader)
            model = body.get("model") if isinstance(body.get("model"), str) else model_name
            return wire.classify_answer(await scores(chains), options, model)
        return await answer(request, "/classify", score)

    @app.get("/health")
    async def health() -> Response:
        if not batcher.running:
            status = "draining" if batcher.closing else "starting"
            return JSONResponse({"status": status}, status_code=503)
        if batcher.last_failure is not None and not await model_answers(batcher):
            return JSONResponse({"status": "unhealthy", "error": batcher.last_failure}, status_code=503)
        meta = scorer.metadata
        return JSONResponse({"status": "ok", "model": model_name, "separator": meta.separator, "loss": meta.loss,
                             "max_length": meta.max_length, "aggregate": options.aggregate,
                             "batch_size": scorer.batch_size, "device": str(scorer.device),
                             "queued_chains": batcher.queued_chains})

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        try:
            check_token(request, token)
        except WireError as err:
            return error_response(err)
        payload, content_type = metrics.render()
        return Response(payload, media_type=content_type)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> Response:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http")
        return error_response(WireError(err.status_code, kind, "", f"{request.method} {request.url.path}: "
                                        f"{err.detail}; the endpoints are POST /v1/score, /get_reward, /classify "
                                        "and GET /health, /metrics"))

    @app.exception_handler(Exception)
    async def server_error(request: Request, err: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)  # a bug: the log keeps the traceback
        return error_response(WireError(500, "internal", "", f"internal error ({type(err).__name__}); see the "
                                                             "server log"))

    return app


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        what = "missing" if not given else "wrong"
        raise WireError(401, "unauthorized", "Authorization", f"Authorization: {what} bearer token; send "
                                                              "'Authorization: Bearer <token>'")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it passes `limit` bytes (by Content-Length, or while streaming when the client
    sends none), so an oversized request never sits in memory."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> WireError:
    return WireError(413, "too_large", "body", f"body: {size} bytes or more; the limit is {limit} "
                                               "(--max-body-bytes); send fewer chains per request")


def refusal(caught: Exception, queued: int, queue_limit: int) -> WireError:
    """The error answer for a request that was refused or whose batch failed."""
    if isinstance(caught, WireError):
        return caught
    if isinstance(caught, Overloaded):
        return WireError(503, "overloaded", "", f"the queue holds {queued} chains (limit {queue_limit}, "
                                                "--queue-limit); retry after a second", retry=True)
    if isinstance(caught, BatchFailed):
        return WireError(503, "batch_failed", "", f"the batch holding this request failed: {caught}; retry",
                         retry=True)
    return WireError(503, "shutting_down", "", "the server is shutting down; send the request to another replica")


def error_response(err: WireError) -> JSONResponse:
    headers = {"Retry-After": RETRY_AFTER_S} if err.retry else {}
    if err.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(err.payload(), status_code=err.status, headers=headers)


class ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


async def unless_client_leaves(request: Request, work: Awaitable[dict]) -> dict:
    """The answer of `work`, unless the client disconnects first: then `work` is cancelled, which cancels its
    place in the queue (the batcher drops it unscored). Starlette never cancels a handler on disconnect by itself,
    and RL workers that time out and retry would otherwise have every abandoned request scored."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    raise ClientGone()


async def _disconnected(request: Request) -> None:
    # The body is read already, so the server's next message for this request is its disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def model_answers(batcher: MicroBatcher) -> bool:
    """Whether the model scores a small chain now (after a failed batch: a CUDA error can leave the device unusable
    for every later call, an out-of-memory error for none)."""
    try:
        await asyncio.wait_for(batcher.submit([HEALTH_PROBE]), HEALTH_PROBE_TIMEOUT_S)
    except (Overloaded, BatchFailed, ShuttingDown, asyncio.TimeoutError):
        return False
    return True


def finite_json(value):
    """The answer with every NaN or infinite number as null: JSON has no such number (the encoder would raise),
    and the rewards in the answer already gave such a chain the floor."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_json(item) for item in value]
    return value


def _counted_scores(scorer: PRMScorer, metrics: ServeMetrics) -> Callable[[list[wire.Chain]], list[list[float | None]]]:
    """score_many, counting the chains with a NaN or infinite score (fp16 overflow, say). Such a chain gets the
    floor as its reward and never wins a ranking; the other chains of its batch are answered as usual."""
    def score_many(chains: list[wire.Chain]) -> list[list[float | None]]:
        scores = scorer.score_many(chains)
        bad = sum(any(s is not None and not math.isfinite(s) for s in chain) for chain in scores)
        if bad:
            metrics.nonfinite_chains.inc(bad)
            log.warning("%d of %d chains got a non-finite score (NaN or inf) and were given the floor; with --dtype "
                        "fp16 or bf16, try --dtype fp32", bad, len(chains))
        return scores
    return score_many


def _free_cache(scorer: PRMScorer) -> Callable[[], None]:
    def free() -> None:
        if scorer.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
    return free
