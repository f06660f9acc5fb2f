"""The PRM lifecycle on one machine, through prmkit's own commands: a policy that solves a fair share of
small-number synthetic problems samples solutions; `prmkit label` labels them (mc and omega); `prmkit train` trains
a PRM on each label source (mc, omega, the exact labels, and the generator's injected-error chains); `prmkit search
--budgets` searches held-out problems guided by the mc PRM; `prmkit eval` compares the four PRMs on the policy's
held-out steps; the exact-label PRM re-chooses among the same samples, and so does the policy's own confidence (its
mean log-prob per token, where the search wrote it: the baseline a PRM must beat). Prints the final tables and writes
bench/results/loop.json.

    python bench/loop.py                    # the cached policy (built first if missing: bench/lifecycle/policy.py)
    python bench/loop.py --work /tmp/loop   # every stage's files there; run it again after a kill to continue

Each stage is skipped when its output is complete and continued where it stopped otherwise (label and search
append and resume; training resumes from its last checkpoint); a continued stage's seconds count every attempt.
Generation runs on the vLLM backend from .venv-vllm when that environment exists (scripts/setup_vllm.sh), else on
the transformers backend.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle import analysis  # noqa: E402
from lifecycle.policy import PolicyRecipe  # noqa: E402
from lifecycle.problems import MAX_VALUE, SEEDS, disjoint_splits, problem_rows, redrawn_split  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402

LABEL_SOURCES = ("mc", "omega", "exact", "injected")
STAGES = ("policy", "problems", "label-mc", "label-omega", "exact-labels", *(f"train-{s}" for s in LABEL_SOURCES),
          "search", "search-tree", "eval", "rescore", "report")
SAMPLING = ("majority", "best-of-n", "weighted-best-of-n")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="loop-work", help="folder for every stage's files (default: %(default)s)")
    parser.add_argument("--policy", default=None, help="policy folder (default: the cached benchmark policy)")
    parser.add_argument("--prm-base", default="smollm2-135m",
                        help="the PRMs' backbone: 'policy' (the policy folder), an alias or a model folder")
    parser.add_argument("--prm-layers", type=int, default=16, help="model.num_layers of the PRMs (0: all)")
    parser.add_argument("--prm-top-layers", type=int, default=8, help="lora.top_layers of the PRMs (0: all)")
    parser.add_argument("--label-problems", type=int, default=48)
    parser.add_argument("--solutions", type=int, default=4, help="sampled solutions per labelled problem")
    parser.add_argument("--k", type=int, default=4, help="rollouts per measured step (mc and omega)")
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--held-out-seed", type=int, default=SEEDS["held_out"],
                        help="draw the held-out problems with this seed instead (after the other splits, leaving "
                        "their problems out, so no problem a recipe was chosen on changes)")
    parser.add_argument("--validation", type=int, default=64, help="problems a PRM recipe is chosen on "
                        "(bench/loop_recipes.py), never the held-out ones")
    parser.add_argument("--budgets", default="1,2,4,8,16")
    parser.add_argument("--tree-problems", type=int, default=20, help="held-out problems for beam and DVTS")
    parser.add_argument("--tree-budgets", default="4")
    parser.add_argument("--eval-per-problem", type=int, default=1, help="held-out samples per problem for eval")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-rounds", type=int, default=6)
    parser.add_argument("--train-steps", type=int, default=48)
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto")
    parser.add_argument("--python", default=sys.executable, help="the environment prmkit train and eval run in")
    parser.add_argument("--stop-after", choices=STAGES, default=None,
                        help="stop after this stage; run the same command again (without it) to go on")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "loop.json"))
    return parser.parse_args(argv)


class Loop:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.state_path = self.work / "state.json"
        self.state = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {"stages": {}}
        self.state_lock = threading.Lock()  # the stage clock's thread saves the state too
        drawn = self.state["stages"].get("problems", {})
        if drawn.get("done") and drawn.get("held_out_seed", SEEDS["held_out"]) != args.held_out_seed:
            raise SystemExit(f"{self.work} holds held-out problems drawn with seed "
                             f"{drawn.get('held_out_seed', SEEDS['held_out'])}; give --held-out-seed "
                             f"{args.held_out_seed} its own --work folder")
        vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
        use_vllm = args.backend == "vllm" or (args.backend == "auto" and vllm_python.is_file())
        self.backend = "vllm" if use_vllm else "transformers"
        self.generation_python = str(vllm_python) if use_vllm else args.python
        # vLLM's CPU backend reserves this share of RAM for its KV cache; the PRM and the checker need the rest.
        self.generation_flags = ["--backend", self.backend, "--max-new-tokens", str(args.max_new_tokens)] + \
            (["--gpu-memory-utilization", "0.2"] if use_vllm else ["--generation-batch-size", "32"])

    # --- bookkeeping -------------------------------------------------------------------------------------------
    HEARTBEAT_SECONDS = 30.0  # how often a running stage saves its time so far: a hard kill loses at most this

    def stage(self, name: str, run) -> dict:
        """Run a stage unless it is done. Its seconds are those of every attempt: an attempt that stops (an error,
        Ctrl-C, SIGTERM) saves its time as seconds_before_resume, and a running one saves it every
        HEARTBEAT_SECONDS, which is what a SIGKILL leaves; the next attempt adds its own."""
        done = self.state["stages"].get(name)
        if done and done.get("done"):
            print(f"== {name}: done before ({done['seconds']:.0f} s)", flush=True)
            if name == self.args.stop_after:
                raise StopAfter(name)
            return done
        before = (done or {}).get("seconds_before_resume", 0.0)
        print(f"== {name}" + (f" (continuing; {before:.0f} s before)" if before else ""), flush=True)
        started = time.perf_counter()

        def spent() -> float:
            return before + time.perf_counter() - started

        with self.stage_clock(name, spent):
            result = run() or {}
        self.save_stage(name, {"done": True, "seconds": round(spent(), 1), **result})
        print(f"== {name}: {spent():.0f} s", flush=True)
        if name == self.args.stop_after:
            raise StopAfter(name)
        return self.state["stages"][name]

    def save_stage(self, name: str, entry: dict) -> None:
        with self.state_lock:
            self.state["stages"][name] = entry
            write_json_atomic(self.state_path, self.state)

    @contextmanager
    def stage_clock(self, name: str, spent):
        """Save the running stage's time every HEARTBEAT_SECONDS, and once more if it stops with an exception."""
        stop = threading.Event()

        def beat():
            while not stop.wait(self.HEARTBEAT_SECONDS):
                self.save_stage(name, {"done": False, "seconds_before_resume": round(spent(), 1)})

        heart = threading.Thread(target=beat, name=f"loop-{name}-clock", daemon=True)
        heart.start()
        try:
            yield
        except BaseException:
            stop.set()
            heart.join()
            self.save_stage(name, {"done": False, "seconds_before_resume": round(spent(), 1)})
            raise
        stop.set()
        heart.join()

    def prmkit(self, python: str, *argv: str) -> None:
        command = [python, "-m", "prmkit", *argv]
        print("$ prmkit " + " ".join(argv), flush=True)
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
        if python == self.generation_python and self.backend == "vllm":
            # vLLM's CPU engine keeps one core for itself unless told otherwise; on a small machine that halves
            # generation, and the engine's own work is light next to the model's
            env.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
        subprocess.run(command, check=True, env=env)

    # --- stages ------------------------------------------------------------------------------------------------
    def policy(self) -> dict:
        if self.args.policy:
            return {"folder": str(Path(self.args.policy).resolve())}
        from lifecycle.policy import build_policy
        folder = build_policy(PolicyRecipe())
        return {"folder": str(folder), "recipe": json.loads((folder / "recipe.json").read_text())}

    def split_sizes(self) -> dict[str, int]:
        """The problem splits' sizes. The policy's SFT problems come first so that no labelled, held-out or
        validation problem is one the policy was fine-tuned on."""
        sft_chains = self.state["stages"]["policy"].get("recipe", {}).get("chains", PolicyRecipe().chains)
        return {"sft": sft_chains, "label": self.args.label_problems, "held_out": self.args.held_out,
                "validation": self.args.validation}

    def problems(self) -> dict:
        splits = disjoint_splits(self.split_sizes())
        if self.args.held_out_seed != SEEDS["held_out"]:
            splits = redrawn_split("held_out", self.args.held_out, self.args.held_out_seed, splits)
        for name, records in splits.items():
            write_jsonl(problem_rows(records), self.work / f"{name}.jsonl")
        # the injected-error PRM's data: as many of the generator's own chains as the policy's labelled ones
        write_jsonl(injected_chains(self.args.label_problems * self.args.solutions),
                    self.work / "labels-injected.jsonl")
        return {"label_problems": len(splits["label"]), "held_out": len(splits["held_out"]),
                "held_out_seed": self.args.held_out_seed, "validation": len(splits["validation"])}

    def label(self, method: str) -> dict:
        out = self.work / f"labels-{method}.jsonl"
        self.prmkit(self.generation_python, "label", str(self.work / "label.jsonl"), str(out), "--policy",
                    self.policy_folder, "--method", method, "--k", str(self.args.k), "--solutions",
                    str(self.args.solutions), "--problems-per-batch", "16", *self.generation_flags)
        records = read_jsonl(out)
        return {"records": len(records), "rollouts": sum(r["label"]["rollouts"] for r in records),
                "tokens": sum(r["label"]["tokens"] for r in records),
                "solutions_correct": sum(bool(r["correct"]) for r in records) / len(records)}

    def exact(self) -> dict:
        problems = {p["prompt"]: p for p in read_jsonl(self.work / "label.jsonl")}
        mc, omega = (read_jsonl(self.work / f"labels-{m}.jsonl") for m in ("mc", "omega"))
        assert [r["completions"] for r in mc] == [r["completions"] for r in omega], \
            "mc and omega labelled different samples; both must sample with the same seed and settings"
        exact = [analysis.with_exact_labels(r, problems[r["prompt"]]) for r in mc]
        write_jsonl(exact, self.work / "labels-exact.jsonl")
        return {"agreement": {"mc": analysis.agreement(mc, exact), "omega": analysis.agreement(omega, exact)},
                "exact_right_steps": sum(sum(r["labels"]) for r in exact) / sum(len(r["labels"]) for r in exact)}

    def prm_config(self, source: str, run_name: str, base: str, layers: int, top_layers: int) -> dict:
        """The `prmkit train` config of one PRM on labels-<source>.jsonl ('policy' as base: the policy folder)."""
        a = self.args
        return {
            "output_dir": str(self.work / "runs"), "run_name": run_name,
            "model": {"base": self.policy_folder if base == "policy" else base, "num_layers": layers or None,
                      "finetune": "lora"},
            "data": {"train": str(self.work / f"labels-{source}.jsonl"), "max_length": 512},
            "lora": {"r": 16, "alpha": 32, "top_layers": top_layers or None},
            "training": {"max_steps": a.train_steps, "batch_size": 8, "lr": 5e-4, "head_init": "probe",
                         "warmup_steps": 5, "logging_steps": 8, "save_steps": max(a.train_steps // 4, 1)},
        }

    def train(self, source: str, run_name: str | None = None, config: dict | None = None) -> dict:
        """Train (or resume, or find finished) the PRM runs/<run_name> on labels-<source>.jsonl."""
        a = self.args
        run_name = run_name or source
        run = self.work / "runs" / run_name
        config = config or self.prm_config(source, run_name, a.prm_base, a.prm_layers, a.prm_top_layers)
        path = self.work / f"train-{run_name}.json"
        write_json_atomic(path, config)
        resume = ["training.resume=latest"] if any(run.glob("checkpoint-*")) and not (run / "prmkit.json").is_file() \
            else []
        if not (run / "prmkit.json").is_file():
            self.prmkit(self.args.python, "train", str(path), *resume)
        return {"run": str(run)}

    def search(self, name: str, budgets: str, methods: str, limit: int) -> dict:
        out = self.work / f"{name}.jsonl"
        self.prmkit(self.generation_python, "search", str(self.work / "runs" / "mc"), str(self.work / "held_out.jsonl"),
                    str(out), "--policy", self.policy_folder, "--budgets", budgets, "--budget-methods", methods,
                    "--max-rounds", str(self.args.max_rounds), "--limit", str(limit), "--problems-per-batch", "50",
                    *self.generation_flags)
        report = json.loads(out.with_name(f"{out.stem}.budgets.json").read_text())
        return {"report": report}

    def evaluate(self) -> dict:
        problems = {p["prompt"]: p for p in read_jsonl(self.work / "held_out.jsonl")}
        chains = analysis.held_out_chains(read_jsonl(self.work / "search.jsonl"), problems,
                                          self.args.eval_per_problem)
        data = self.work / "held_out_steps.jsonl"
        write_jsonl(chains, data)
        runs = [str(self.work / "runs" / s) for s in LABEL_SOURCES]
        out = self.work / "eval"
        if out.exists():
            shutil.rmtree(out)  # an eval is one pass over fixed files: a killed one starts again
        self.prmkit(self.args.python, "eval", *runs, str(data), "--out", str(out), "--report-chains", "20")
        comparison = json.loads((out / "comparison.json").read_text())
        return {"chains": len(chains), "steps": sum(len(c["labels"]) for c in chains),
                "wrong_steps": sum(c["labels"].count(0) for c in chains), "rows": comparison["rows"]}

    def rescore(self) -> dict:
        """The exact-label PRM's choice among the mc search's samples (the same samples, other scores)."""
        from prmkit.scoring.aggregate import aggregate
        from prmkit.scoring.scorer import PRMScorer

        rows = read_jsonl(self.work / "search.jsonl")
        scorer = PRMScorer.from_pretrained(str(self.work / "runs" / "exact"), device="cpu")
        how = rows[0]["options"]["aggregate"]
        rescored = analysis.rescored_rows(rows, scorer.score_many, lambda s: aggregate(s, how))
        write_jsonl(rescored, self.work / "search-exact-prm.jsonl")
        return {}

    def report(self) -> dict:
        """Accuracy by N of every chooser among the mc search's samples, each chooser minus majority voting (paired
        by problem). Where the samples carry the policy's mean log-prob, best-of-n and weighted best-of-n by it
        ('policy confidence', `analysis.confidence_rows`) are choosers too, the baseline a PRM must beat, and
        `versus_confidence` holds each PRM chooser minus the same chooser by confidence; without it (a search
        before prmkit wrote mean_logprob) the report is what it was."""
        rows = {"mc": read_jsonl(self.work / "search.jsonl"), "exact": read_jsonl(self.work / "search-exact-prm.jsonl")}
        budgets = [int(n) for n in self.args.budgets.split(",")]
        choosers = {f"{prm} PRM": prm_rows for prm, prm_rows in rows.items()}
        confident = analysis.confidence_rows(rows["mc"], max(budgets))
        if confident is not None:
            choosers["policy confidence"] = confident
        table = {"greedy": {"1": analysis.bootstrap_accuracy(analysis.outcomes(rows["mc"], "greedy", 1))},
                 "majority": {}, "pass@N": {}}
        comparisons, versus_confidence = {}, {}
        for n in budgets:
            majority = analysis.outcomes(rows["mc"], "majority", n)
            table["majority"][str(n)] = analysis.bootstrap_accuracy(majority)
            table["pass@N"][str(n)] = {"accuracy": sum(any(s["correct"] for s in r["samples"][:n])
                                                       for r in rows["mc"]) / len(rows["mc"])}
            picks = {}
            for chooser, chooser_rows in choosers.items():
                for method in ("best-of-n", "weighted-best-of-n"):
                    picked = picks[method, chooser] = analysis.outcomes(chooser_rows, method, n)
                    table.setdefault(f"{method} ({chooser})", {})[str(n)] = analysis.bootstrap_accuracy(picked)
                    comparisons[f"{method} ({chooser}) - majority @ {n}"] = analysis.paired_bootstrap(picked, majority)
            if confident is not None:
                for prm in rows:
                    for method in ("best-of-n", "weighted-best-of-n"):
                        versus_confidence[f"{method} ({prm} PRM) - {method} (policy confidence) @ {n}"] = \
                            analysis.paired_bootstrap(picks[method, f"{prm} PRM"], picks[method, "policy confidence"])
        tree = read_jsonl(self.work / "search-tree.jsonl")
        for method in ("beam", "dvts"):
            for n in self.args.tree_budgets.split(","):
                table.setdefault(f"{method} (mc PRM)", {})[n] = analysis.bootstrap_accuracy(
                    analysis.outcomes(tree, method, int(n)))
        tokens = {n: sum(sum(s["tokens"] for s in r["samples"][:n]) for r in rows["mc"]) / len(rows["mc"])
                  for n in budgets}
        confidence = {"versus_confidence": versus_confidence,
                      "confidence_score": analysis.CONFIDENCE_SCORE} if confident is not None else {}
        return {"table": table, "comparisons": comparisons, "sample_tokens_per_problem": tokens, **confidence}

    def run(self) -> dict:
        try:
            return self.run_stages()
        except StopAfter as stop:
            print(f"stopped after {stop}; run the command again without --stop-after to go on", flush=True)
            return {"stages": self.state["stages"]}

    def run_stages(self) -> dict:
        a = self.args
        self.policy_folder = self.stage("policy", self.policy)["folder"]
        self.stage("problems", self.problems)
        for method in ("mc", "omega"):
            self.stage(f"label-{method}", lambda m=method: self.label(m))
        self.stage("exact-labels", self.exact)
        for source in LABEL_SOURCES:
            self.stage(f"train-{source}", lambda s=source: self.train(s))
        self.stage("search", lambda: self.search("search", a.budgets, ",".join(("greedy", *SAMPLING)), a.held_out))
        self.stage("search-tree", lambda: self.search("search-tree", a.tree_budgets, "beam,dvts", a.tree_problems))
        self.stage("eval", self.evaluate)
        self.stage("rescore", self.rescore)
        report = self.stage("report", self.report)
        seconds = {name: s["seconds"] for name, s in self.state["stages"].items()}
        result = {"command": "python bench/loop.py " + " ".join(sys.argv[1:]), "backend": self.backend,
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores", "settings": vars(a),
                  "stages": self.state["stages"], "seconds": seconds,
                  "loop_seconds": sum(v for k, v in seconds.items() if k != "policy")}
        write_json_atomic(a.out, result)
        print_tables(report, self.state["stages"], a.k, Path(a.out).with_suffix(".png"))
        return result


class StopAfter(Exception):
    """Raised after the stage --stop-after names."""


def injected_chains(n: int) -> list[dict]:
    """n of the synthetic generator's own chains (30% correct, one injected error in the rest) whose numbers all
    stay at or below MAX_VALUE, like the benchmark's problems; the same for the same n."""
    kept: list[dict] = []
    for batch in range(1_000):
        records = generate_records(40 * n, seed=404 if batch == 0 else 404_000 + batch)
        kept += [r for r in records
                 if all(int(x) <= MAX_VALUE for step in r["completions"] for x in re.findall(r"\d+", step))]
        if len(kept) >= n:
            return kept[:n]
    raise AssertionError(f"the generator gave fewer than {n} small-number chains")


def print_tables(report: dict, stages: dict, k: int, png: Path) -> None:
    from lifecycle.tables import markdown_tables, plot
    plot(report, png)
    print(markdown_tables(report, stages, k))
    print(f"-> {png}")


def main(argv=None) -> dict:
    return Loop(parse_args(argv)).run()


if __name__ == "__main__":
    # SIGTERM (kill, a scheduler's stop) unwinds like Ctrl-C: the running stage saves its time, its child stops
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    main()
