"""Shared-prompt groups scored by prmkit and by vLLM's pooling runner: the same PRM, the same chains.

GRPO-like groups of 8 and best-of-16 groups (GSM8K questions as prompts, GSM8K solutions cut into steps as
completions, as bench/prefix_reuse.py builds them) are scored by SmolLM2-135M with an untrained one-output head
(speed does not depend on the weights), four ways, fp32 on this CPU:

    prmkit whole      PRMScorer.score_many with prefix reuse off: every chain read from its first token
    prmkit reuse      PRMScorer.score_many as shipped: chains of one prompt read it once (prmkit.scoring.prefix)
    vLLM              the folder `prmkit export --vllm` writes, in vLLM's offline pooling runner (LLM.encode, the
                      STEP pooler), token ids from VLLMInputs: the engine behind `vllm serve`, without HTTP
    vLLM prefix cache the same with enable_prefix_caching=True

prmkit runs here (.venv); vLLM runs in .venv-vllm (scripts/setup_vllm.sh), after prmkit, never at the same time.
Each way is warmed up on one group, then timed `--repeats` times over all groups (median; prmkit's two ways
alternate). Scores must agree with
prmkit's whole-chain scores.

    .venv/bin/python bench/vllm_groups.py --out bench/results/vllm_groups.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def scenarios(rows: list[dict], count: int) -> dict[str, tuple[int, list]]:
    from prefix_reuse import groups

    return {"grpo_group_8": (8, groups(rows, 8, count)), "best_of_16": (16, groups(rows, 16, count // 2))}


def timed(work, repeats: int) -> tuple[list[float], object]:
    seconds, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = work()
        seconds.append(time.perf_counter() - start)
    return seconds, out


def measure_prmkit(scorer, chains: list, size: int, repeats: int) -> dict:
    """Whole chains and prefix reuse, alternating repeat by repeat, so a slow spell of the machine hits both."""
    ways = {"prmkit_whole": False, "prmkit_reuse": True}
    results = {name: {"seconds": [], "scores": None} for name in ways}
    for name, reuse in ways.items():  # warm-up
        scorer.reuse_prefix = reuse
        scorer.score_many(chains[:size])
    for _ in range(repeats):
        for name, reuse in ways.items():
            scorer.reuse_prefix = reuse
            seconds, results[name]["scores"] = timed(lambda: scorer.score_many(chains), 1)
            results[name]["seconds"] += seconds
    return results


def measure_vllm(payload: dict) -> dict:
    """Inside .venv-vllm: each engine setting loaded once, warmed up on one group, timed on every scenario."""
    from vllm import LLM

    settings = json.loads((Path(payload["folder"]) / "prmkit_vllm.json").read_text(encoding="utf-8"))
    out = {}
    for name, prefix_caching in (("vllm", False), ("vllm_prefix_cache", True)):
        start = time.perf_counter()
        try:
            llm = LLM(model=payload["folder"], runner="pooling", dtype="float32", max_model_len=1024,
                      gpu_memory_utilization=payload["memory"], pooler_config=settings["pooler_config"],
                      enable_prefix_caching=prefix_caching)
        except Exception as err:  # noqa: BLE001 - an engine setting vLLM refuses is a result to report
            out[name] = {"error": f"{type(err).__name__}: {err}"[:500]}
            continue
        load_s = time.perf_counter() - start
        out[name] = {"load_s": load_s, "scenarios": {}}
        for scenario, (size, inputs) in payload["scenarios"].items():
            prompts = [{"prompt_token_ids": ids} for ids in inputs]

            def encode(batch=prompts):
                outputs = llm.encode(batch, pooling_task="token_classify", use_tqdm=False)
                return [output.outputs.data.tolist() for output in outputs]

            encode(prompts[:size])  # warm-up
            seconds, scores = timed(encode, payload["repeats"])
            out[name]["scenarios"][scenario] = {"seconds": seconds, "scores": scores}
        llm.llm_engine.engine_core.shutdown()
        del llm
    return out


def largest_difference(scores: list, reference: list) -> float:
    return max(abs(a - b) for x, y in zip(scores, reference) for a, b in zip(x, y) if a is not None and b is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=8, help="GRPO groups of 8 (best-of-16: half as many)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-memory-share", type=float, default=0.2, help="vLLM's share of the node's memory")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vllm_groups.json")
    parser.add_argument("--inside-vllm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside_vllm:
        print(json.dumps(measure_vllm(json.load(sys.stdin))))
        return

    import torch
    from common import untrained_scorer
    from prefix_reuse import gsm8k_rows

    from prmkit.scoring.export_vllm import VLLMInputs, export_vllm, step_scores

    rows = gsm8k_rows(GSM8K, 200)
    work = Path(tempfile.mkdtemp(prefix="prmkit-vllm-groups-"))
    scorer = untrained_scorer(batch_size=16)
    folder = work / "prm"  # the untrained PRM as a merged export: weights, tokenizer, prmkit.json
    scorer.model.save_pretrained(folder)
    scorer.tokenizer.save_pretrained(folder)
    scorer.metadata.save(folder)
    exported = export_vllm(folder, work / "vllm")
    inputs = VLLMInputs.from_folder(exported)

    cases = scenarios(rows, args.groups)
    results: dict = {}
    for scenario, (size, chains) in cases.items():
        results[scenario] = {"chains": len(chains), "group_size": size, **measure_prmkit(scorer, chains, size,
                                                                                           args.repeats)}
    payload = {"folder": str(exported), "memory": args.cpu_memory_share, "repeats": args.repeats,
               "scenarios": {name: (size, [inputs.token_ids(p, s) for p, s in chains])
                             for name, (size, chains) in cases.items()}}
    if VLLM_PYTHON.is_file():
        done = subprocess.run([str(VLLM_PYTHON), __file__, "--inside-vllm"], input=json.dumps(payload), text=True,
                              capture_output=True, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"})
        if done.returncode:
            raise SystemExit(f"vLLM run failed:\n{done.stderr[-3000:]}")
        vllm = json.loads(done.stdout.strip().splitlines()[-1])
    else:
        vllm = {"error": f"no {VLLM_PYTHON}; create it with scripts/setup_vllm.sh"}

    summary: dict = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "torch_threads":
                     torch.get_num_threads(), "machine": f"{os.cpu_count()} cores", "scenarios": {}}
    for scenario, (size, chains) in cases.items():
        measured = results[scenario]
        reference = measured["prmkit_whole"]["scores"]
        ways = {name: measured[name] for name in ("prmkit_whole", "prmkit_reuse")}
        for name, engine in vllm.items():
            if isinstance(engine, dict) and "scenarios" in engine:
                got = engine["scenarios"][scenario]
                ways[name] = {"seconds": got["seconds"],
                              "scores": [step_scores(rows_, steps) for rows_, (_, steps) in zip(got["scores"], chains)]}
        row = {"chains": len(chains), "group_size": size}
        for name, way in ways.items():
            median = statistics.median(way["seconds"])
            row[name] = {"chains_per_s": round(len(chains) / median, 3),
                         "seconds": [round(s, 3) for s in way["seconds"]],
                         "max_score_difference": largest_difference(way["scores"], reference)}
        whole = row["prmkit_whole"]["chains_per_s"]
        row["vs_prmkit_whole"] = {name: round(row[name]["chains_per_s"] / whole, 3) for name in ways}
        summary["scenarios"][scenario] = row
    summary["vllm"] = {name: ({"load_s": round(e["load_s"], 1)} if "load_s" in e else e) if isinstance(e, dict)
                       else e for name, e in vllm.items()}
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which re-imports this file
    main()
