"""BENCHMARKS.md's smaller tables: RL rewards and load, generation and labelling, the optimizer step, layer probes
and the lifecycle's stage times, each rendered from its results file (see bench/render.py)."""

from __future__ import annotations

from render_kit import load, ratio, spread, table


def rl_grpo_table() -> str:
    data = load("rl_grpo")
    rows = []
    for step, (logged, seconds) in enumerate(zip(data["steps"], data["seconds_per_step"]), 1):
        rows.append([str(step), f"{logged['rewards/prm_local/mean']:.4f}", f"{logged['rewards/prm_remote/mean']:.4f}",
                     f"{logged['prm_local/truncated_share']:g}", f"{logged['completions/mean_length']:.1f}",
                     f"{seconds:.1f}"])
    return table(["step", "`rewards/prm_local/mean`", "`rewards/prm_remote/mean`", "`prm_*/truncated_share`",
                  "completion length (mean)", "seconds"], rows)


RL_LOAD_RUNS = {
    "rl_load": "batches split where they would be mostly padding (the default now)",
    "rl_load_padded_batches": "before that rule: one runaway chain padded its 15 batch mates to its length",
    "rl_load_mbt4096": "before that rule, `--max-batch-tokens 4096`",
}


def rl_load_table() -> str:
    rows = []
    for name, label in RL_LOAD_RUNS.items():
        data = load(name)
        rates = data["chains_per_s"]
        sent = data["groups"] * data["completions_per_group"] * data["repeats"]
        rows.append([label, ", ".join(f"{r:.2f}" for r in rates["rl_groups"]),
                     ", ".join(f"{r:.2f}" for r in rates["single_chains"]), ratio(data["rl_vs_single_chains"]),
                     f"{data['group_latency_p50_s']:.1f} s / {data['group_latency_p99_s']:.1f} s",
                     f"{data['failed_requests']} of {sent}", f"`{name}.json`"])
    return table(["server", "RL groups, chains/s per round", "single chains, chains/s per round", "RL / single",
                  "group latency p50 / p99", "failed requests", "results"], rows, "lrrrrrl")


def vllm_rollouts_table() -> str:
    runs = load("vllm_rollouts")["runs"]
    rows = []
    for scenario, label in (("solution", "whole solution (no stop, max 128 tokens)"),
                            ("step", "one step (stop at a blank line, max 64 tokens)")):
        hf, vllm = runs["transformers"]["scenarios"][scenario], runs["vllm"]["scenarios"][scenario]
        rows.append([label, f"{hf['tokens_per_s']:.1f}", f"{vllm['tokens_per_s']:.1f}",
                     f"{vllm['tokens_per_s'] / hf['tokens_per_s']:.0f}x",
                     f"{hf['load_average_before']:.1f}, {vllm['load_average_before']:.1f}"])
    return table(["scenario", "transformers tokens/s", "vLLM tokens/s", "vLLM / transformers",
                  "load avg before (tf, vLLM)"], rows)


def label_table() -> str:
    results = load("label")["results"]
    rows = [[method, str(r["rollouts"]), f"{r['tokens']:,}", f"{r['rollouts_per_step']:.1f}",
             f"{r['seconds_per_step']:.1f}", f"{r['tokens_per_s']:.1f}"] for method, r in results.items()]
    return table(["method", "rollouts", "tokens", "rollouts per labelled step", "seconds per labelled step",
                  "tokens/s"], rows)


OPTIMIZERS = {"foreach": "`adamw_torch` (foreach)", "fused": "**`adamw_torch_fused`**", "single": "per-tensor loop"}


def optimizer_table() -> str:
    results = {r["variant"]: r for r in load("optimizer")["results"]}
    rows = []
    for key, label in OPTIMIZERS.items():
        r = results[key]
        steps = [run["optimizer_step_s"] for run in r.get("runs", [r])]
        rows.append([label, spread(steps, 2), f"{r['peak_rss_gb']:.2f} GiB"])
    return table(["AdamW (3 steps, 4 x 256 tokens, one thread, fresh process each)",
                  "optimizer step s, median (min-max)", "peak RSS"], rows)


def probe_table() -> str:
    layers = [8, 10, 12, 14, 16, 18, 20, 24, 30]
    rows = []
    for name, label in (("probe-600rows", "probe on 600 chains"), ("probe", "probe on 300 chains")):
        found = load(name)["results"]
        rows.append([label] + [f"{found[f'layer_{n}_auroc']:.3f}" if f"layer_{n}_auroc" in found else "-"
                               for n in layers])
    return table(["layer of 30"] + [str(n) if n != 30 else "30 (last)" for n in layers], rows)


LOOP_STAGES = {
    "policy": "policy (cached)", "problems": "problems", "label-mc": "label-mc", "label-omega": "label-omega",
    "train-mc": "train-mc (beside the test suite: not comparable with the other three)", "train-omega": "train-omega",
    "train-exact": "train-exact", "train-injected": "train-injected",
    "search": "search (200 problems, greedy + 16 samples each, PRM scores; its last quarter beside other jobs)",
    "search-tree": "search-tree (20 problems, beam and DVTS at N = 4)", "eval": "eval",
    "rescore": "rescore (the exact-label PRM on the same samples)", "report": "report",
}


def loop_stages_table() -> str:
    data = load("loop")
    seconds = data["seconds"]
    rows = [[label, f"{seconds[stage]:,.0f}"] for stage, label in LOOP_STAGES.items()]
    total = data["loop_seconds"]
    rows.append(["**loop from the cached policy**", f"**{total:,.0f} ({total / 60:.0f} min)**"])
    return table(["stage", "seconds"], rows)


RENDERERS = {name: globals()[name] for name in (
    "rl_grpo_table", "rl_load_table", "vllm_rollouts_table", "label_table", "optimizer_table", "probe_table",
    "loop_stages_table")}
