"""Rollouts/s and generated tokens/s of SmolLM2-135M-Instruct on GSM8K prompts: the transformers backend against the
vLLM backend, same chat prompts, n, max_new_tokens, stop strings, temperature and seed. Each backend runs in its own
environment (.venv for transformers, .venv-vllm for vLLM), one after the other, never at the same time; the
machine's load average is recorded beside each timing. Loading (and vLLM's compilation) is timed apart, and one
short call warms each backend up before the timed calls.

    .venv/bin/python bench/vllm_rollouts.py --prompts 8 --n 4 --out bench/results/vllm_rollouts.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PYTHONS = {"transformers": ROOT / ".venv" / "bin" / "python", "vllm": ROOT / ".venv-vllm" / "bin" / "python"}
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
# (name, stop strings, max_new_tokens): whole solutions, and one step at a time as search and labelling sample
SCENARIOS = [("solution", [], 128), ("step", ["\n\n"], 64)]


def measure(backend: str, args) -> dict:
    """Runs inside the backend's environment: load, warm up, then time each scenario."""
    from prmkit.backbones import resolve_base
    from prmkit.generation import GenerationOptions
    from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT

    model = args.model or resolve_base("smollm2-135m")
    problems = [json.loads(line)["question"] for line in GSM8K.read_text(encoding="utf-8").splitlines()[:args.prompts]]
    options = GenerationOptions(backend=backend, temperature=0.8, seed=0, system_prompt=DEFAULT_SYSTEM_PROMPT,
                                generation_batch_size=args.generation_batch_size,
                                gpu_memory_utilization=args.cpu_memory_share)
    start = time.perf_counter()
    if backend == "vllm":
        from prmkit.generation.vllm_backend import VLLMGenerator

        generator = VLLMGenerator(model, options, max_model_len=1024)
    else:
        from prmkit.generation.hf import TransformersGenerator

        generator = TransformersGenerator(model, options)
    load_s = time.perf_counter() - start
    prompts = [generator.prompt(problem) for problem in problems]
    generator.generate(prompts[:1], n=1, max_new_tokens=8)
    results = {"backend": backend, "load_s": round(load_s, 1), "scenarios": {}}
    for name, stop, max_new_tokens in SCENARIOS:
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        out = generator.generate(prompts, n=args.n, stop=stop, max_new_tokens=max_new_tokens)
        seconds = time.perf_counter() - start
        samples = [s for per_prompt in out for s in per_prompt]
        tokens = sum(s.tokens for s in samples)
        reasons = {r: sum(s.finish_reason == r for s in samples) for r in ("stop", "eos", "length")}
        results["scenarios"][name] = {
            "stop": stop, "max_new_tokens": max_new_tokens, "rollouts": len(samples), "tokens": tokens,
            "seconds": round(seconds, 2), "rollouts_per_s": round(len(samples) / seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1), "finish_reasons": reasons,
            "load_average_before": round(load_before, 2), "first_text": samples[0].text[:200]}
    generator.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8, help="first N GSM8K test questions")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--generation-batch-size", type=int, default=16, help="transformers backend")
    parser.add_argument("--cpu-memory-share", type=float, default=0.2,
                        help="vLLM on CPU: share of the node's memory it reserves (its GPU default, 0.9, is too much "
                             "on a shared machine)")
    parser.add_argument("--model", default=None, help="policy folder (default: smollm2-135m)")
    parser.add_argument("--backend", choices=["both", "transformers", "vllm"], default="both")
    parser.add_argument("--out", default="bench/results/vllm_rollouts.json")
    args = parser.parse_args()
    if args.backend != "both":
        print(json.dumps(measure(args.backend, args)))
        return
    if not GSM8K.is_file():
        raise SystemExit(f"{GSM8K} not found; this benchmark reads GSM8K test questions from shared/data")
    from prmkit.backbones import resolve_base

    args.model = args.model or resolve_base("smollm2-135m")  # one folder for both environments
    runs = {}
    for backend, python in PYTHONS.items():
        if not python.is_file():
            raise SystemExit(f"{python} not found; create it with scripts/setup.sh or scripts/setup_vllm.sh")
        command = [str(python), __file__, "--backend", backend, "--prompts", str(args.prompts), "--n", str(args.n),
                   "--generation-batch-size", str(args.generation_batch_size),
                   "--cpu-memory-share", str(args.cpu_memory_share)] + (["--model", args.model] if args.model else [])
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"{backend} run failed:\n" + "\n".join(done.stderr.splitlines()[-30:]))
        runs[backend] = json.loads(done.stdout.strip().splitlines()[-1])
    speedup = {name: round(runs["vllm"]["scenarios"][name]["tokens_per_s"]
                           / runs["transformers"]["scenarios"][name]["tokens_per_s"], 2) for name, _, _ in SCENARIOS}
    report = {"command": " ".join(sys.argv), "prompts": args.prompts, "n": args.n, "cpu_count": os.cpu_count(),
              "runs": runs, "vllm_over_transformers_tokens_per_s": speedup}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which re-imports this file
    main()
