"""The settings of `prmkit serve`, each default written once.

How the model is loaded and how many chains go into one forward pass are `ScoringOptions` (device, dtype,
batch_size = chains per forward pass, max_batch_tokens = padded tokens per forward pass, max_length), shared with
`prmkit score`; `ServeOptions` adds what a server needs on top. A field name is also the command-line flag:
`max_wait_ms` = `--max-wait-ms`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from prmkit.errors import PRMError
from prmkit.scoring.aggregate import AGGREGATIONS, FLOOR, TRUNCATED
from prmkit.scoring.inputs import MAX_STEP_CHARS, MAX_STEPS

LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"  # loopback: nothing off this machine can connect unless asked for
    port: int = 8000
    aggregate: str = "min"  # the chain score of /v1/score and the reward of /get_reward and /classify
    floor: float = FLOOR  # the reward of a chain with no scorable step (as PRMReward's floor)
    truncated: str = "kept"  # reward of a chain cut by max_length: "kept" scores what fits, "floor" gives floor
    max_wait_ms: float = 5.0  # how long a partial batch waits for more chains before it runs
    queue_limit: int = 4096  # chains accepted but not yet scored; past it requests get 503 + Retry-After
    max_body_bytes: int = 16 * 1024 * 1024  # one request's JSON body
    max_request_chains: int = 1024  # chains in one request: candidates, /get_reward queries or /classify inputs
    max_steps: int = MAX_STEPS  # steps of one chain the model reads; later ones are answered unscored (truncated)
    max_step_chars: int = MAX_STEP_CHARS  # from a longer step on, a chain's steps are answered unscored (truncated)
    token_env: str = "PRMKIT_SERVE_TOKEN"  # environment variable holding the bearer token; unset: no token
    access_log: bool = False  # one log line per request (off: at thousands of requests a second it costs CPU)

    def __post_init__(self):
        problems = []
        if self.aggregate not in AGGREGATIONS:
            problems.append(f"aggregate={self.aggregate!r} is not known; use one of {', '.join(AGGREGATIONS)}")
        if self.truncated not in TRUNCATED:
            problems.append(f"truncated={self.truncated!r} is not known; use 'kept' or 'floor'")
        if not 0 <= self.port <= 65535:
            problems.append(f"port={self.port}; use 0-65535 (0: any free port)")
        if self.max_wait_ms < 0:
            problems.append(f"max_wait_ms={self.max_wait_ms}; use 0 or more milliseconds")
        for name in ("queue_limit", "max_body_bytes", "max_request_chains", "max_steps", "max_step_chars"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)}; use a positive number")
        if self.queue_limit < self.max_request_chains:
            problems.append(f"queue_limit={self.queue_limit} is below max_request_chains={self.max_request_chains}, "
                            "so a request at the limit could never be queued; raise queue_limit")
        if not self.token_env:
            problems.append("token_env is empty; name the environment variable that holds the bearer token")
        if problems:
            raise PRMError("; ".join(problems))

    def replace(self, **changes) -> "ServeOptions":
        return replace(self, **changes)

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the server."""
        if self.host in LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name other than localhost: it may resolve anywhere
            return False
