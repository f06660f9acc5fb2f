"""`prmkit serve` throughput on SmolLM2-135M: many concurrent single-chain clients on loopback against the same
chains scored in-process by `score_many` (the ceiling: no HTTP, all chains known up front, sorted by length) and
one chain at a time (what a server without batching does). One run measures all three on the same chains, in
alternating rounds; medians are reported.

The server runs in a child process (as in deployment: its own interpreter, its own GIL); the clients, one
connection each, run in this process, so on this 2-core machine they share the CPU with the server, as a trainer
on the same machine would. The untrained head does not change the cost, and the scores are checked equal.
Besides wall-clock rates it reports CPU seconds per chain (server and client processes together for the server),
which other work on a shared machine disturbs much less than wall time.

    python bench/serve_throughput.py --requests 128 --clients 64 --repeats 3 --out bench/results/serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# Idle OpenMP threads sleep instead of spinning, so on a shared machine CPU time counts work, not waiting; set
# before torch loads, and inherited by the server process.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import httpx  # noqa: E402
import torch  # noqa: E402
from common import backbone_path, sgemm_gflops  # noqa: E402

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.model import PRMMetadata, load_token_classifier, load_tokenizer  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402


def build_scorer(batch_size: int, max_batch_tokens: int | None = None) -> PRMScorer:
    path = backbone_path()
    torch.manual_seed(0)  # the same random head in this process and the server's
    model = load_token_classifier(path)
    tokenizer = load_tokenizer(path)
    model.config.pad_token_id = tokenizer.pad_token_id
    metadata = PRMMetadata(base_model="smollm2-135m", base_path=path, finetune="none", loss="bce",
                           separator="\n\n", max_length=1024)
    return PRMScorer(model, tokenizer, metadata, device="cpu", batch_size=batch_size,
                     max_batch_tokens=max_batch_tokens)


def make_chains(n: int, steps: int) -> list[tuple[str, list[str]]]:
    """Synthetic word problems with their first `steps` steps (repeating the last when a chain is shorter)."""
    chains = []
    for record in generate_records(n, seed=7):
        chain = record["completions"][:steps]
        chains.append((record["prompt"], chain + [chain[-1]] * (steps - len(chain))))
    return chains


def serve_child(args) -> None:
    import uvicorn

    from prmkit.serving.app import create_app
    from prmkit.serving.options import ServeOptions

    scorer = build_scorer(args.batch_size, getattr(args, "max_batch_tokens", None))
    app = create_app(scorer, ServeOptions(max_wait_ms=args.max_wait_ms), model_name="smollm2-135m")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


async def drive(url: str, chains, clients: int) -> tuple[float, list[float], list]:
    """`clients` workers, one connection each, take the next chain as soon as their last answer came back."""
    todo = list(enumerate(chains))
    answers: list = [None] * len(chains)
    latencies: list[float] = []

    async def client():
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            while todo:
                index, (prompt, steps) = todo.pop(0)
                start = time.perf_counter()
                response = await http.post("/v1/score", json={"prompt": prompt, "steps": steps})
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()
                answers[index] = response.json()["step_scores"]

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - start, latencies, answers


def batch_stats(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("prmkit_batch_chains_"))
    return float(values["prmkit_batch_chains_sum"]), float(values["prmkit_batch_chains_count"])


def start_server(args) -> tuple[subprocess.Popen, str]:
    url = f"http://127.0.0.1:{args.port}"
    child = subprocess.Popen([sys.executable, __file__, "--child", "--port", str(args.port), "--batch-size",
                              str(args.batch_size), "--max-wait-ms", str(args.max_wait_ms)]
                             + (["--max-batch-tokens", str(args.max_batch_tokens)]
                                if getattr(args, "max_batch_tokens", None) else []))
    deadline = time.monotonic() + 300
    while True:
        assert child.poll() is None and time.monotonic() < deadline, "the server did not start"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return child, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(fn, pids: tuple[int, ...] = ()):
    """Wall seconds, CPU seconds (this process plus `pids`) and the result of fn()."""
    wall, cpu, others = time.perf_counter(), time.process_time(), sum(cpu_seconds(p) for p in pids)
    result = fn()
    cpu = time.process_time() - cpu + sum(cpu_seconds(p) for p in pids) - others
    return time.perf_counter() - wall, cpu, result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=128, help="chains sent, one per request")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients")
    parser.add_argument("--steps", type=int, default=4, help="steps per chain")
    parser.add_argument("--batch-size", type=int, default=16, help="chains per forward pass (both sides)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three variants; medians reported")
    parser.add_argument("--single-chains", type=int, default=32,
                        help="chains scored one at a time per round (the slowest variant; its rate is per chain)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--out", default="bench/results/serve.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--max-batch-tokens", type=int, default=None, help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.child:
        return serve_child(args)

    chains = make_chains(args.requests, args.steps)
    scorer = build_scorer(args.batch_size)
    single = PRMScorer(scorer.model, scorer.tokenizer, scorer.metadata, device="cpu", batch_size=1)
    tokens = statistics.mean(len(scorer.tokenize(p, s).input_ids) for p, s in chains)
    rates: dict[str, list[float]] = {"server": [], "in_process": [], "one_at_a_time": []}
    cpu_per_chain: dict[str, list[float]] = {name: [] for name in rates}
    latencies: list[float] = []
    sgemm = []  # the machine's matmul rate before each round
    loads = []  # other work on this shared machine skews wall-clock numbers: the 1-minute load before each round
    child, url = start_server(args)
    try:
        asyncio.run(drive(url, chains[:4], 4))  # warm-up: first requests pay for lazy initialisation
        scorer.score_many(chains[:4])
        before = batch_stats(url)
        # Rounds alternate the variants, so a burst of other work on the machine hits all of them alike.
        for _ in range(args.repeats):
            loads.append(os.getloadavg()[0])
            sgemm.append(sgemm_gflops())
            wall, cpu, (_, round_latencies, served) = measured(
                lambda: asyncio.run(drive(url, chains, args.clients)), (child.pid,))
            latencies += round_latencies
            record(rates, cpu_per_chain, "server", len(chains), wall, cpu)
            wall, cpu, reference = measured(lambda: scorer.score_many(chains))
            record(rates, cpu_per_chain, "in_process", len(chains), wall, cpu)
            wall, cpu, _ = measured(lambda: [single.score(p, s) for p, s in chains[:args.single_chains]])
            record(rates, cpu_per_chain, "one_at_a_time", args.single_chains, wall, cpu)
        after = batch_stats(url)
    finally:
        child.terminate()
        child.wait(timeout=120)

    def ratio(table, a, b, inverse=False):
        values = [(y / x if inverse else x / y) for x, y in zip(table[a], table[b])]
        return statistics.median(values)

    summary = {
        "chains": len(chains), "mean_tokens_per_chain": round(tokens, 1), "clients": args.clients,
        **{f"{name}_chains_per_s": statistics.median(values) for name, values in rates.items()},
        "server_vs_in_process": ratio(rates, "server", "in_process"),
        "server_vs_one_at_a_time": ratio(rates, "server", "one_at_a_time"),
        **{f"{name}_cpu_s_per_chain": statistics.median(values) for name, values in cpu_per_chain.items()},
        "server_vs_in_process_by_cpu": ratio(cpu_per_chain, "server", "in_process", inverse=True),
        "server_vs_one_at_a_time_by_cpu": ratio(cpu_per_chain, "server", "one_at_a_time", inverse=True),
        "latency_p50_s": percentile(latencies, 0.5), "latency_p99_s": percentile(latencies, 0.99),
        "mean_batch_chains": (after[0] - before[0]) / max(1.0, after[1] - before[1]),
        "max_score_difference": max(abs(a - b) for x, y in zip(served, reference) for a, b in zip(x, y)),
        "load_average_before_each_round": loads, "sgemm_gflops_before_each_round": sgemm,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "rates": rates,
                                          "cpu_s_per_chain": cpu_per_chain}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


def record(rates: dict, cpu_per_chain: dict, name: str, chains: int, wall: float, cpu: float) -> None:
    rates[name].append(chains / wall)
    cpu_per_chain[name].append(cpu / chains)
    print(f"{name:14s} {chains / wall:6.3f} chains/s  {cpu / chains:6.3f} CPU s per chain", flush=True)


if __name__ == "__main__":
    main()
