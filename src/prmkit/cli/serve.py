"""`prmkit serve`: load a trained PRM and answer scoring requests over HTTP, a thin call into prmkit.serving."""

from __future__ import annotations

import os
import signal
import sys

from prmkit.cli.common import add_scoring_flags, quiet_transformers, scoring_options
from prmkit.scoring.aggregate import AGGREGATION_NAMES
from prmkit.serving.options import ServeOptions

LOG_LEVELS = ("debug", "info", "warning", "error")


def register(commands) -> None:
    # Defaults are read off the class (dataclass fields keep them as class attributes): no instance, no torch.
    serve = commands.add_parser(
        "serve", help="serve a trained PRM over HTTP for RL trainers (OpenRLHF, verl, TRL) and scripts",
        description="Endpoints: POST /v1/score (prmkit's own), POST /get_reward (OpenRLHF's remote reward), "
                    "POST /classify (vLLM's, as verl calls it), GET /health, GET /metrics (Prometheus). "
                    "Concurrent requests are batched into one forward pass. A bearer token, when wanted, is read "
                    f"from the environment variable named by --token-env (default {ServeOptions.token_env}), "
                    "never from the command line.")
    serve.add_argument("run", help="run folder, checkpoint or merged export")
    serve.add_argument("--host", default=ServeOptions.host,
                       help="address to listen on (default: %(default)s, this machine only)")
    serve.add_argument("--port", type=int, default=ServeOptions.port, help="default: %(default)s; 0: any free port")
    serve.add_argument("--aggregate", default=ServeOptions.aggregate, choices=AGGREGATION_NAMES,
                       help="chain score and reward (default: %(default)s)")
    serve.add_argument("--floor", type=float, default=ServeOptions.floor,
                       help="reward of a chain with no scorable step (default: %(default)s)")
    serve.add_argument("--truncated", default=ServeOptions.truncated,
                       help="reward of a chain cut by max_length: kept (score the steps that fit) or floor "
                            "(default: %(default)s)")
    serve.add_argument("--max-wait-ms", type=float, default=ServeOptions.max_wait_ms,
                       help="how long a partial batch waits for more requests (default: %(default)s)")
    serve.add_argument("--queue-limit", type=int, default=ServeOptions.queue_limit,
                       help="chains waiting for the model; past it requests get 503 (default: %(default)s)")
    serve.add_argument("--max-body-bytes", type=int, default=ServeOptions.max_body_bytes,
                       help="request body size (default: %(default)s)")
    serve.add_argument("--max-request-chains", type=int, default=ServeOptions.max_request_chains,
                       help="candidates, queries or inputs per request (default: %(default)s)")
    serve.add_argument("--max-steps", type=int, default=ServeOptions.max_steps,
                       help="steps of a chain the model reads; later steps are answered unscored and the chain "
                            "truncated, never refused (default: %(default)s)")
    serve.add_argument("--max-step-chars", type=int, default=ServeOptions.max_step_chars,
                       help="from a step longer than this on, a chain's steps are answered unscored and the chain "
                            "truncated (default: %(default)s)")
    serve.add_argument("--token-env", default=ServeOptions.token_env,
                       help="environment variable holding the bearer token (default: %(default)s)")
    serve.add_argument("--access-log", action="store_true", default=ServeOptions.access_log,
                       help="log every request")
    serve.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="default: %(default)s")
    add_scoring_flags(serve)
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    import uvicorn

    from prmkit.scoring.scorer import PRMScorer
    from prmkit.serving.app import create_app

    options = ServeOptions(host=args.host, port=args.port, aggregate=args.aggregate, floor=args.floor,
                           truncated=args.truncated, max_wait_ms=args.max_wait_ms, queue_limit=args.queue_limit,
                           max_body_bytes=args.max_body_bytes, max_request_chains=args.max_request_chains,
                           max_steps=args.max_steps, max_step_chars=args.max_step_chars, token_env=args.token_env,
                           access_log=args.access_log)
    token = os.environ.get(options.token_env) or None
    warning = exposure_warning(options, token)
    if warning:
        print(f"prmkit serve: warning: {warning}", file=sys.stderr)
    quiet_transformers()
    scorer = PRMScorer.from_options(args.run, scoring_options(args))
    if scorer.compiled:  # before listening: the first requests would otherwise wait for the compilation
        print("prmkit serve: compiling the model (--compile)...", file=sys.stderr, flush=True)
        print(f"prmkit serve: compiled in {scorer.warm_up():.0f} s", file=sys.stderr, flush=True)
    app = create_app(scorer, options, token=token, model_name=str(args.run))
    print(f"prmkit serve: {args.run} loaded on {scorer.device.type} (batch {scorer.batch_size} chains, separator "
          f"{scorer.metadata.separator!r}, token {'required' if token else 'off'})", file=sys.stderr, flush=True)
    stops = _count_stop_signals()
    uvicorn.run(app, host=options.host, port=options.port, log_level=args.log_level, access_log=options.access_log)
    if stops:
        print("prmkit serve: stopped; every accepted request was answered", file=sys.stderr)
    return 0


def exposure_warning(options: ServeOptions, token: str | None) -> str | None:
    """What to tell someone who opened the model to other machines with no token; None when loopback or a token."""
    if token is not None or options.loopback:
        return None
    return (f"listening on {options.host} without a token, so anyone who can reach this port can use the model; "
            f"set {options.token_env} to require 'Authorization: Bearer <token>'")


def _count_stop_signals() -> list[int]:
    """uvicorn answers SIGTERM/SIGINT with a graceful shutdown, then raises the signal again for the handler that
    was there before it; with Python's defaults that kills the process (or raises KeyboardInterrupt) after a clean
    stop. This handler only records the signal, so a drained server exits 0."""
    stops: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stops.append(number))
    return stops
