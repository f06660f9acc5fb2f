"""BENCHMARKS.md's quality tables and verdicts (peers on PRM800K, the lifecycle loop, GRPO, batching and quality),
each rendered from its results file (see bench/render.py)."""

from __future__ import annotations

from render_kit import goal, interval, load, ratio, table, verdict

QUALITY_SYSTEMS = {
    "trl": "TRL PRMTrainer, LoRA r16 all-linear, lr 1e-4",
    "pk-lora": "**prmkit LoRA**, the same settings",
    "pk-recipe": "**prmkit recipe** (16 layers, LoRA on the top 8, probe head, lr 5e-4)",
    "soup": "soup-cli, full fine-tune, lr 1e-5",
    "pk-full": "**prmkit full fine-tune**, lr 1e-5",
}


def processbench_cell(split: dict) -> str:
    """F1 (accuracy on chains with an error / without one)."""
    return f"{split['f1']:.3f} ({split['error_accuracy']:.2f} / {split['correct_accuracy']:.2f})"


def peer_quality_table() -> str:
    systems = load("peer_quality")["systems"]
    rows = []
    for key, label in QUALITY_SYSTEMS.items():
        s = systems[key]
        common = s["heldout_common"]
        minus = common.get("minus_trl_95")
        rows.append([label, f"{s['heldout_last_step_auroc']:.3f} ({s['heldout_rows_scored']})",
                     f"{common['auroc']:.3f} [{common['auroc_95'][0]:.2f}, {common['auroc_95'][1]:.2f}]",
                     f"[{minus[0]:+.3f}, {minus[1]:+.3f}]" if minus else "-",
                     processbench_cell(s["processbench"]["gsm8k"]), processbench_cell(s["processbench"]["math"]),
                     f"{s['training']['wall_s'] / 60:.0f} min", f"{s['training']['peak_rss_gb']:.2f} GB"])
    rows_all = systems["trl"]["heldout_common"]["rows"]
    return table(["system", "held-out AUROC (rows scored)", f"on the {rows_all} rows all scored [95%]",
                  "minus TRL's [95%]", "ProcessBench gsm8k F1", "ProcessBench math F1", "training wall",
                  "training peak RSS"], rows)


def loop_stage(name: str) -> dict:
    return load("loop")["stages"][name]


def loop_labels_table() -> str:
    agreement = loop_stage("exact-labels")["agreement"]
    rows = []
    for method in ("mc", "omega"):
        a = agreement[method]
        rows.append([method, str(a["chains"]), str(a["steps"]), f"{a['step_agreement']:.3f}",
                     f"{a['first_error_agreement']:.3f}", f"{a['exact_right_steps_called_wrong']:.3f}",
                     f"{a['exact_wrong_steps_called_right']:.3f}", f"{a['rollouts']:,}",
                     f"{a['rollouts_per_chain']:.1f}", f"{a['tokens']:,}"])
    return table(["method", "chains", "steps", "step agreement", "first-error agreement", "exact-right called wrong",
                  "exact-wrong called right", "rollouts", "rollouts per chain", "tokens"], rows)


def loop_prms_table() -> str:
    rows = [[row["prm"], f"{row['AUROC']:.3f}", f"{row['error F1']:.3f}"] for row in loop_stage("eval")["rows"]
            if row["split"] == "held_out_steps"]
    return table(["PRM trained on", "held-out step AUROC", "error F1"], rows)


def loop_search_table() -> str:
    report = loop_stage("report")
    methods, budgets = report["table"], ["1", "2", "4", "8", "16"]
    rows = []
    for method, cells in methods.items():
        row = [method]
        for n in budgets:
            cell = cells.get(n)
            if cell is None:
                row.append("-")
            elif "low" in cell:
                row.append(f"{cell['accuracy']:.3f} {interval(cell)}")
            else:
                row.append(f"{cell['accuracy']:.3f}")
        rows.append(row)
    rows.append(["sampled tokens per problem"] + [f"{report['sample_tokens_per_problem'][n]:.0f}" for n in budgets])
    return table(["method"] + [f"N={n}" for n in budgets], rows, "llllll")


def loop_paired_table() -> str:
    comparisons = loop_stage("report")["comparisons"]
    rows = [[name, f"{c['difference']:+.3f}", interval(c, signed=True)] for name, c in comparisons.items()
            if not name.endswith("@ 1")]
    return table(["comparison", "difference", "95% interval"], rows, "lrl")


def loop_recipes_table(name: str = "loop_recipes") -> str:
    """The `last` aggregate of every recipe, then the baselines where the results hold them (the policy's own
    confidence: its one score, no step AUROC)."""
    rows = []
    data = load(name)
    recipes = {recipe: (r, "last") for recipe, r in data["recipes"].items()}
    recipes.update({baseline: (r, next(iter(r["aggregates"]))) for baseline, r in data.get("baselines", {}).items()})
    for recipe, (r, how) in recipes.items():
        last = r["aggregates"][how]
        diff = last["weighted-best-of-n - majority"]
        step = "-" if r["step_auroc"] is None else f"{r['step_auroc']:.3f}"
        rows.append([recipe, step, how, f"{last['chain_auroc']:.3f}",
                     f"{last['within_problem']['auroc']:.3f} ({last['within_problem']['pairs']} pairs)",
                     f"{last['best-of-n']:.3f}", f"{last['weighted-best-of-n']:.3f}", f"{r['majority']:.3f}",
                     f"{diff['difference']:+.3f} {interval(diff, signed=True)}"])
    return table(["recipe", "step AUROC", "aggregate", "chain AUROC", "within-problem AUROC", "best-of-8",
                  "weighted best-of-8", "majority@8", "weighted - majority [95%]"], rows, "lllllllll")


def loop_verdicts() -> str:
    report = loop_stage("report")
    comparisons = report["comparisons"]
    weighted = [comparisons[f"weighted-best-of-n (mc PRM) - majority @ {n}"] for n in (8, 16)]
    prms = {row["prm"]: row["AUROC"] for row in loop_stage("eval")["rows"] if row["split"] == "held_out_steps"}
    auroc_ratio = prms["mc"] / prms["exact"]
    minutes = load("loop")["loop_seconds"] / 60
    agreement = loop_stage("exact-labels")["agreement"]
    omega, mc = agreement["omega"], agreement["mc"]
    labels_met = omega["step_agreement"] >= mc["step_agreement"] and omega["rollouts"] < mc["rollouts"]
    policy = report["table"]["greedy"]["1"]["accuracy"]
    within = verdict("loop_policy_low", policy) == verdict("loop_policy_high", policy) == "met"
    policy_verdict = "met" if within else "missed"
    greedy = report["table"]["greedy"]["1"]["accuracy"]
    best = max(cell["accuracy"] for method, cells in report["table"].items() if method not in ("greedy", "pass@N")
               for cell in cells.values())
    return "\n".join([
        f"- Weighted best-of-N with the mc-label PRM above majority voting at N = 8 and 16, paired interval above 0: "
        f"**{verdict('loop_weighted_vs_majority', *(w['low'] for w in weighted))}** "
        f"(N = 8: {weighted[0]['difference']:+.3f} {interval(weighted[0], signed=True)}; N = 16: "
        f"{weighted[1]['difference']:+.3f} {interval(weighted[1], signed=True)}).",
        f"- The mc-label PRM at {goal('loop_mc_vs_exact_auroc')} the exact-label PRM's held-out step AUROC: "
        f"**{verdict('loop_mc_vs_exact_auroc', auroc_ratio)}**, {prms['mc']:.3f} against {prms['exact']:.3f} "
        f"({ratio(auroc_ratio)}); omega's labels reach {ratio(prms['omega'] / prms['exact'])}.",
        f"- Omega's labels agree with the exact ones at least as well as mc's for fewer rollouts: "
        f"**{'met' if labels_met else 'missed'}**, {omega['step_agreement']:.3f} against {mc['step_agreement']:.3f} "
        f"of steps with {omega['rollouts']:,} rollouts against {mc['rollouts']:,}.",
        f"- A policy that solves 20-70% greedily: **{policy_verdict}**, "
        f"{100 * policy:.1f}%.",
        f"- The whole loop from the cached policy in under 60 minutes: **{verdict('loop_minutes', minutes)}**, "
        f"{minutes:.0f} minutes.",
        f"- Greedy decoding ({greedy:.3f}) is at or above every sampling and search method at every N "
        f"(the best of them: {best:.3f})." if greedy >= best else
        f"- The best sampling or search method ({best:.3f}) is above greedy decoding ({greedy:.3f})."])


GRPO_REWARDS = {"outcome": "(a) `outcome`: answer correctness", "prm-scalar": "(b) `prm-scalar`: `PRMReward` (min)",
                "sum": "(c) `sum` (DeepSeekMath)", "min": "(d) `min` (PURE)"}


def process_grpo_table() -> str:
    data = load("process_grpo")
    before = data["before"]
    rows = [["before (the policy)", f"{before['accuracy']:.3f} {interval(before)}", "-", "-", "-", "-"]]
    for key, label in GRPO_REWARDS.items():
        run = data["runs"][key]
        drift, change = run["drift"], run["after - before"]
        rows.append([label, f"{run['after']['accuracy']:.3f} {interval(run['after'])}",
                     f"{change['difference']:+.3f} {interval(change, signed=True)}",
                     f"{drift['answer_accuracy']['first']:.2f} -> {drift['answer_accuracy']['last']:.2f}",
                     f"{drift['tokens_per_completion']['first']:.1f} -> {drift['tokens_per_completion']['last']:.1f}",
                     f"{drift['seconds_per_step']:.1f}"])
    return table(["reward", "held-out greedy after", "after - before", "train answer acc., first -> last fifth",
                  "tokens/completion", "s/step"], rows)


def process_grpo_pairs() -> str:
    pairs = load("process_grpo")["pairs"]
    rows = [[name, f"{p['difference']:+.3f}", interval(p, signed=True)] for name, p in pairs.items()]
    return table(["held-out greedy, paired by problem", "difference", "95% interval"], rows, "lrl")


def grouping_quality_table() -> str:
    data = load("grouping_quality")
    seeds = {}
    grouped, random = load("demo-length-grouped-batches")["after"], load("demo-default")["after"]
    seeds[0] = ({"auroc": grouped["auroc"], "accuracy": grouped["accuracy"],
                 "first_error_accuracy": grouped["first_error_accuracy"], "padding_share": None},
                {"auroc": random["auroc"], "accuracy": random["accuracy"],
                 "first_error_accuracy": random["first_error_accuracy"], "padding_share": None})
    for run in data["runs"]:
        pair = seeds.setdefault(run["seed"], [None, None])
        pair[0 if run["group_by_length"] else 1] = run
    rows = []
    for seed, (g, r) in sorted(seeds.items()):
        padding = "not recorded" if g["padding_share"] is None else \
            f"{100 * g['padding_share']:.1f}% / {100 * r['padding_share']:.0f}%"
        rows.append([str(seed), f"{g['auroc']:.3f} / {r['auroc']:.3f}", f"{g['accuracy']:.3f} / {r['accuracy']:.3f}",
                     f"{g['first_error_accuracy']:.2f} / {r['first_error_accuracy']:.2f}", padding])
    paired = data["paired"]
    rows.append(["mean difference, grouped - random (seeds 1-3)", f"{paired['auroc']['mean']:+.3f}",
                 f"{paired['accuracy']['mean']:+.3f}", f"{paired['first_error_accuracy']['mean']:+.3f}", ""])
    return table(["seed", "step AUROC grouped / random", "step accuracy grouped / random",
                  "first-error accuracy grouped / random", "padding grouped / random"], rows)


# (results file, run, whether other jobs shared the machine: its wall time is then no speed figure)
DEMO_RUNS = [
    ("demo-default", "**defaults** (16 layers, probe on 800 chains, lr 5e-4, 1,600 rows, 200 steps)", False),
    ("demo-length-grouped-batches", "the same with length-grouped batches (`training.group_by_length: true`)", False),
    ("demo-1600rows-lr1e-3-headlr1e-4", "the same, lr 1e-3 for the adapters and 1e-4 for the head", True),
    ("demo-2000rows-250steps-lr5e-4", "the same recipe on 2,000 rows, 250 steps (another sample of chains)", False),
    ("demo-20layers-1600rows-lr5e-4", "20 layers, probe on 800 chains, lr 5e-4, 1,600 rows, 200 steps", False),
    ("demo-20layers-1600rows-lr1e-3-headlr1e-4", "20 layers, lr 1e-3, head lr 1e-4", False),
    ("demo-probe256-lr5e-5", "the previous defaults: probe on 256 chains, lr 5e-5, 800 rows, 100 steps", False),
    ("demo-probe256-lr2e-4-headlr1e-5", "the previous defaults, head lr 1e-5 (head held still), lr 2e-4", True),
]
DEMO_EARLIER = [
    ("demo-previous-defaults", "16 layers, top 8, probe head (256 chains), lr 2e-4, 800 rows, 100 steps", False),
    ("demo-n16-top8-probe-head-90steps", "16 layers, top 8, probe head, lr 2e-4, 600 rows, 90 steps", True),
    ("demo-n16-top8-random-head", "16 layers, top 8, random head, lr 1e-3, 600 rows, 90 steps", True),
    ("demo-n30-top8-random-head", "30 layers, top 8, random head, lr 1e-3, 600 rows, 90 steps", False),
    ("demo-top16", "30 layers, top 16, random head, lr 1e-3, 600 rows, 90 steps", False),
    ("demo-n20-top12-random-head-step187", "20 layers, top 12, random head, lr 1e-3, 3000 rows, step 187 of 375",
     True),
    ("demo-n20-top12-random-head-375steps", "the same run resumed from that checkpoint to step 375", True),
]


def demo_rows(runs: list[tuple[str, str, bool]]) -> list[list[str]]:
    rows = []
    for name, label, shared in runs:
        data = load(name)
        before, after = data.get("before", {}), data["after"]
        seconds = data.get("seconds")
        wall = "shared" if shared or seconds is None else f"{seconds:.0f} s"
        places = 4 if name.startswith("demo-20layers-1600rows-lr5e-4") else 3
        start = f"{before['auroc']:.{places}f}" if "auroc" in before else "not recorded"
        first = f"{before['first_error_accuracy']:.2f}" if "first_error_accuracy" in before else "-"
        rows.append([label, wall, f"{start} -> {after['auroc']:.{places}f}",
                     f"{first} -> {after['first_error_accuracy']:.2f}", f"`{name}.json`"])
    return rows


def demo_verdicts() -> str:
    data = load("demo-default")
    before, after = data["before"], data["after"]
    best = max(load(name)["after"]["auroc"] for name, _, _ in DEMO_RUNS)
    return (f"Against the targets (`demo-default.json`): **trained > probe-only on held-out data: "
            f"{verdict('demo_gain', after['auroc'] - before['auroc'])}** ({after['auroc']:.3f} vs "
            f"{before['auroc']:.3f}; first-error accuracy {after['first_error_accuracy']:.2f} vs "
            f"{before['first_error_accuracy']:.2f}), **under 10 minutes: {verdict('demo_seconds', data['seconds'])}** "
            f"({data['seconds']:.0f} s), **held-out step AUROC {goal('demo_auroc', '')}: "
            f"{verdict('demo_auroc', after['auroc'])}** ({after['auroc']:.3f}; the best run of the table above: "
            f"{best:.4f}).")


DEMO_HEADER = ["run", "seconds (its results.json)", "step AUROC start -> trained", "first-error accuracy", "results"]


def demo_table() -> str:
    return table(DEMO_HEADER, demo_rows(DEMO_RUNS), "lrrrl")


def demo_earlier_table() -> str:
    return table(DEMO_HEADER, demo_rows(DEMO_EARLIER), "lrrrl")


RENDERERS = {name: globals()[name] for name in (
    "peer_quality_table", "loop_labels_table", "loop_prms_table", "loop_search_table", "loop_paired_table",
    "loop_recipes_table", "loop_verdicts", "process_grpo_table", "process_grpo_pairs", "grouping_quality_table",
    "demo_table", "demo_earlier_table", "demo_verdicts")}
RENDERERS["loop_recipes_injected_table"] = lambda: loop_recipes_table("loop_recipes-injected-1600")
