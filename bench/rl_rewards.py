"""prmkit as the reward of an RL run, measured on this CPU with the real clients.

Part `grpo`: TRL's GRPOTrainer trains SmolLM2-135M-Instruct for a few steps on synthetic word problems, rewarded
at once by the in-process `PRMReward` and by `RemotePRMReward` against a `prmkit serve` process of the same PRM
(a LoRA PRM on SmolLM2 trained here first, cached in --work). It reports every step's rewards under both names,
the share of completions the PRM could not read whole, the wall time per step, and whether the two rewards agree on
every completion of the last step.

Part `load`: an RL-shaped load on the server of `bench/serve_throughput.py` (SmolLM2-135M, untrained head, batch 16,
its own process): 8 GRPO-like clients, each sending groups of 8 completions of one prompt through
`RemotePRMReward` (one request per completion, all at once) as soon as its last group was rewarded, one completion
in 50 degenerate (600 short steps, or one step of 30,000 characters). Side by side in the same run, alternating:
serve_throughput's closed loop of 64 single-chain clients on the same chains. Every request must succeed.

    python bench/rl_rewards.py --part grpo --out bench/results/rl_grpo.json
    python bench/rl_rewards.py --part load --out bench/results/rl_load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import httpx  # noqa: E402
import serve_throughput  # noqa: E402
from common import backbone_path  # noqa: E402

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.serving.clients import RemotePRMReward  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GROUP = 8
DEGENERATE_EVERY = 50


def train_prm(work: Path, steps: int) -> Path:
    """A small LoRA PRM on SmolLM2 (examples/synthetic-lora.yaml, shortened), trained once and kept in `work`."""
    run = work / "prm"
    if (run / "prmkit.json").exists():
        return run
    subprocess.run([sys.executable, "-m", "prmkit", "data", "synth", str(work / "data")], check=True)
    subprocess.run([sys.executable, "-m", "prmkit", "train", str(ROOT / "examples" / "synthetic-lora.yaml"),
                    f"output_dir={work}", "run_name=prm", f"data.train={work / 'data' / 'train.jsonl'}",
                    f"data.val={work / 'data' / 'val.jsonl'}", f"training.max_steps={steps}",
                    f"training.eval_steps={steps}", f"training.save_steps={steps}"], check=True)
    return run


def serve(run: Path, port: int) -> tuple[subprocess.Popen, str]:
    url = f"http://127.0.0.1:{port}"
    child = subprocess.Popen([sys.executable, "-m", "prmkit", "serve", str(run), "--port", str(port),
                              "--device", "cpu"])
    deadline = time.monotonic() + 300
    while True:
        assert child.poll() is None and time.monotonic() < deadline, "the server did not start"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return child, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)


def grpo(args) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from prmkit.scoring.reward import PRMReward

    run = train_prm(Path(args.work), args.prm_steps)
    child, url = serve(run, args.port)
    try:
        local = PRMReward(run, aggregate="min", device="cpu", name="prm_local")
        remote = RemotePRMReward(url, aggregate="min", name="prm_remote")
        system = "Solve the problem step by step. Put each step on its own line, with a blank line between steps."
        prompts = [[{"role": "system", "content": system}, {"role": "user", "content": r["prompt"]}]
                   for r in generate_records(args.grpo_steps, seed=11)]
        step_ends: list[float] = []

        class StepClock(TrainerCallback):
            def on_step_end(self, *_, **__):
                step_ends.append(time.perf_counter())

        config = GRPOConfig(output_dir=str(Path(args.work) / "grpo"), use_cpu=True, max_steps=args.grpo_steps,
                            per_device_train_batch_size=GROUP, num_generations=GROUP,
                            max_completion_length=args.max_completion_length, logging_steps=1, report_to=[],
                            save_strategy="no", learning_rate=1e-6, seed=0, bf16=False)
        path = backbone_path()
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[local, remote],
                              args=config, train_dataset=Dataset.from_dict({"prompt": prompts}),
                              processing_class=AutoTokenizer.from_pretrained(path), callbacks=[StepClock()])
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        by_local = list(trainer._logs["rewards"]["prm_local"])
        by_remote = list(trainer._logs["rewards"]["prm_remote"])
    finally:
        child.terminate()
        child.wait(timeout=60)
    steps = [{key: entry[key] for key in entry if key.startswith(("rewards/", "prm_", "completions/mean_length"))}
             for entry in trainer.state.log_history if "rewards/prm_local/mean" in entry]
    times = [b - a for a, b in zip([start] + step_ends, step_ends)]
    return {"policy": "SmolLM2-135M-Instruct (full fine-tune, fp32)", "prm": str(run), "steps": steps,
            "seconds_per_step": times, "wall_seconds": wall, "completions_per_step": GROUP,
            "max_completion_length": args.max_completion_length,
            "last_step_largest_reward_difference": max(abs(a - b) for a, b in zip(by_local, by_remote))}


def degenerate(index: int) -> str:
    if index % 2:
        return "\n\n".join(["7 * 2 = 14."] * 600)
    return "The answer is " + "9" * 30_000


def rl_groups(n_groups: int) -> list[tuple[str, list[str]]]:
    """GRPO-shaped groups: one prompt, 8 completions (other problems' 4-step chains, so the lengths match
    serve_throughput's chains); completion k of the whole run is degenerate when k % 50 == 49."""
    chains = serve_throughput.make_chains(n_groups * GROUP, steps=4)
    groups, k = [], 0
    for g in range(n_groups):
        completions = []
        for prompt_steps in chains[g * GROUP:(g + 1) * GROUP]:
            completions.append(degenerate(k) if k % DEGENERATE_EVERY == DEGENERATE_EVERY - 1
                               else "\n\n".join(prompt_steps[1]))
            k += 1
        groups.append((chains[g * GROUP][0], completions))
    return groups


async def drive_groups(url: str, groups, clients: int) -> dict:
    todo = list(groups)
    latencies: list[float] = []
    failures: list[str] = []
    rewards: list[float] = []

    async def client():
        reward = RemotePRMReward(url, aggregate="min")
        while todo:
            prompt, completions = todo.pop(0)
            start = time.perf_counter()
            try:
                rewards.extend(await reward(prompts=[prompt] * len(completions), completions=completions))
            except Exception as err:  # noqa: BLE001 - a failed request is what this benchmark counts
                failures.append(f"{type(err).__name__}: {err}")
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return {"wall": time.perf_counter() - start, "latencies": latencies, "failures": failures, "rewards": rewards}


def load(args) -> dict:
    server_args = argparse.Namespace(port=args.port, batch_size=16, max_wait_ms=5.0,
                                     max_batch_tokens=args.max_batch_tokens)
    child, url = serve_throughput.start_server(server_args)
    groups = rl_groups(args.groups)
    singles = serve_throughput.make_chains(args.groups * GROUP, steps=4)
    rounds: dict[str, list[float]] = {"rl_groups": [], "single_chains": []}
    failures, latencies = [], []
    try:
        for _ in range(args.repeats):
            result = asyncio.run(drive_groups(url, groups, clients=8))
            rounds["rl_groups"].append(args.groups * GROUP / result["wall"])
            failures += result["failures"]
            latencies += result["latencies"]
            wall, _, _ = asyncio.run(serve_throughput.drive(url, singles, clients=64))
            rounds["single_chains"].append(len(singles) / wall)
        metrics = httpx.get(f"{url}/metrics").text
        batch_sum, batch_count = serve_throughput.batch_stats(url)
    finally:
        child.terminate()
        child.wait(timeout=60)
    degenerate_count = args.groups * GROUP // DEGENERATE_EVERY
    errors = [line for line in metrics.splitlines() if line.startswith("prmkit_errors_total{")]
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"server_max_batch_tokens": args.max_batch_tokens, "groups": args.groups, "completions_per_group": GROUP, "clients": 8, "repeats": args.repeats,
            "degenerate_per_round": degenerate_count, "failed_requests": len(failures), "failures": failures[:5],
            "server_errors": errors, "chains_per_s": rounds, "rl_vs_single_chains":
                median(rounds["rl_groups"]) / median(rounds["single_chains"]),
            "group_latency_p50_s": serve_throughput.percentile(latencies, 0.5),
            "group_latency_p99_s": serve_throughput.percentile(latencies, 0.99),
            "mean_batch_chains": batch_sum / batch_count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("grpo", "load"), required=True)
    parser.add_argument("--work", default="/tmp/prmkit-rl-bench", help="where the PRM and TRL's output go")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--prm-steps", type=int, default=40, help="training steps of the PRM (grpo)")
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--groups", type=int, default=25, help="groups of 8 completions per round (load)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of each load variant, alternating")
    parser.add_argument("--max-batch-tokens", type=int, default=None,
                        help="the server's padded-token budget per forward pass (load; default: none)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = {"command": "python " + " ".join(sys.argv), **(grpo(args) if args.part == "grpo" else load(args))}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
