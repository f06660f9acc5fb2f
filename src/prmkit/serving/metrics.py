"""What `GET /metrics` exposes, in Prometheus text through prometheus_client.

Each server gets its own registry (not the library's global one), so two apps in one process, as in the tests,
count separately. Names:
    prmkit_requests_total{endpoint, status}       requests answered
    prmkit_errors_total{endpoint, kind}           refused or failed requests, by kind (invalid, too_large, ...)
    prmkit_queue_chains                           chains accepted and waiting for the model
    prmkit_batch_chains                           chains per model call (histogram; _sum / _count = mean batch)
    prmkit_batch_seconds                          seconds per model call (histogram)
    prmkit_request_seconds{endpoint}              request latency, arrival to answer (histogram)
    prmkit_chains_total                           chains scored
    prmkit_dropped_chains_total                   chains dropped unscored: their client left while they waited
    prmkit_nonfinite_chains_total                 chains with a NaN or infinite score (given the floor)
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ServeMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("prmkit_requests", "Requests answered", ["endpoint", "status"],
                                registry=self.registry)
        self.errors = Counter("prmkit_errors", "Requests refused or failed, by kind", ["endpoint", "kind"],
                              registry=self.registry)
        self.queue_chains = Gauge("prmkit_queue_chains", "Chains accepted and waiting for the model",
                                  registry=self.registry)
        self.batch_chains = Histogram("prmkit_batch_chains", "Chains per model call", buckets=BATCH_BUCKETS,
                                      registry=self.registry)
        self.batch_seconds = Histogram("prmkit_batch_seconds", "Seconds per model call", buckets=LATENCY_BUCKETS,
                                       registry=self.registry)
        self.latency = Histogram("prmkit_request_seconds", "Request latency, arrival to answer", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.chains = Counter("prmkit_chains", "Chains scored", registry=self.registry)
        self.dropped_chains = Counter("prmkit_dropped_chains", "Chains dropped unscored: their client left while "
                                      "they waited", registry=self.registry)
        self.nonfinite_chains = Counter("prmkit_nonfinite_chains", "Chains with a NaN or infinite score, given the "
                                        "floor", registry=self.registry)

    def answered(self, endpoint: str, status: int, seconds: float, kind: str | None = None) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)
        if kind is not None:
            self.errors.labels(endpoint, kind).inc()

    def batch(self, chains: int, seconds: float) -> None:
        self.batch_chains.observe(chains)
        self.batch_seconds.observe(seconds)
        self.chains.inc(chains)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
