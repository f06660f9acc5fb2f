"""The FastAPI app of `prmkit serve`: authentication, bounded bodies, the endpoints, and error answers.

Every request goes the same way: token check, body read up to `max_body_bytes`, parse and validate (wire.py), then
the chains join the micro-batcher's queue and the answer is shaped from their scores. Anything refused is a JSON
error `{"error": {"kind", "field", "message"}}` with a 4xx status (503 + Retry-After when the queue is full or a
batch failed), never a traceback. `/health` answers 200 only while the model is loaded and requests are taken;
after SIGTERM it answers 503 "draining", so a load balancer stops sending work while accepted requests finish.
"""

from __future__ import annotations

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


def create_app(scorer: PRMScorer, options: ServeOptions, *, token: str | None = None,
               model_name: str = "prmkit") -> FastAPI:
    """A server for a loaded scorer; `token`, when given, must come as `Authorization: Bearer <token>` on every
    endpoint but /health. Chains per model call = the scorer's batch_size; padded tokens per forward pass = its
    max_batch_tokens."""
    metrics = ServeMetrics()
    batcher = MicroBatcher(_finite_scores(scorer), max_chains=scorer.batch_size,
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
            response = JSONResponse(await score(body))
        except (WireError, Overloaded, BatchFailed, ShuttingDown) as caught:
            err = refusal(caught, batcher.queued_chains, options.queue_limit)
            kind, response = err.kind, error_response(err)
        metrics.answered(endpoint, response.status_code, time.monotonic() - start, kind)
        return response

    @app.post("/v1/score")
    async def v1_score(request: Request) -> Response:
        async def score(body: dict) -> dict:
            parsed = wire.read_score(body, reader)
            return wire.score_answer(parsed, await batcher.submit(parsed.chains))
        return await answer(request, "/v1/score", score)

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Response:
        async def score(body: dict) -> dict:
            return wire.reward_answer(await batcher.submit(wire.read_reward(body, reader, end_tokens)), options)
        return await answer(request, "/get_reward", score)

    @app.post("/classify")
    async def classify(request: Request) -> Response:
        async def score(body: dict) -> dict:
            chains = wire.read_classify(body, reader)
            model = body.get("model") if isinstance(body.get("model"), str) else model_name
            return wire.classify_answer(await batcher.submit(chains), options, model)
        return await answer(request, "/classify", score)

    @app.get("/health")
    async def health() -> Response:
        if not batcher.running:
            status = "draining" if batcher.closing else "starting"
            return JSONResponse({"status": status}, status_code=503)
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


def _finite_scores(scorer: PRMScorer) -> Callable[[list[wire.Chain]], list[list[float | None]]]:
    """score_many, failing the batch on a NaN or infinite score (fp16 overflow, say): JSON has no such number,
    and a NaN reward would poison an RL update."""
    def score_many(chains: list[wire.Chain]) -> list[list[float | None]]:
        scores = scorer.score_many(chains)
        if any(s is not None and not math.isfinite(s) for chain in scores for s in chain):
            raise FloatingPointError("the model gave a non-finite score (NaN or inf); with --dtype fp16 or bf16, "
                                     "try --dtype fp32")
        return scores
    return score_many


def _free_cache(scorer: PRMScorer) -> Callable[[], None]:
    def free() -> None:
        if scorer.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
    return free
