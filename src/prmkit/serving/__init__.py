"""A trained PRM as a service: `prmkit serve` (app: the HTTP endpoints; wire: request and answer formats and the
chain reward; batcher: concurrent requests coalesced into shared forward passes; metrics: Prometheus counters;
options: every default) and `clients` (RemotePRMReward: the server as a TRL reward function)."""
