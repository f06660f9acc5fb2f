"""BENCHMARKS.md's speed tables and verdicts, each rendered from its results file (see bench/render.py)."""

from __future__ import annotations

from render_kit import RESULTS, bold, goal, load, ratio, spread, table, verdict

TRAIN_VARIANTS = {
    "naive_full": "naive full fine-tune",
    "prmkit_full": "prmkit full fine-tune",
    "prmkit_full_packed": "prmkit full fine-tune, packed",
    "prmkit_lora": "prmkit LoRA r=16, all linear layers",
    "prmkit_lora_top8": "prmkit LoRA r=16, last 8 of 30 layers (`lora.top_layers: 8`)",
    "prmkit_lora_top8_packed": "the same, packed",
}


def train_table() -> str:
    data = load("train")
    summary, runs = data["summary"], data["runs"]
    naive = summary["naive_full"]
    rows = []
    for key, label in TRAIN_VARIANTS.items():
        s = summary[key]
        sgemm = [r["sgemm_gflops"] for r in runs[key]]
        rows.append([label, f"{s['tokens_per_s']:.1f}", ratio(s["tokens_per_s"] / naive["tokens_per_s"]),
                     f"{s['peak_rss_mib']:,.0f} MiB", ratio(s["peak_rss_mib"] / naive["peak_rss_mib"]),
                     f"{s['trainable_params'] / 1e6:.1f} M", f"{min(sgemm):.0f}-{max(sgemm):.0f}"])
    return table(["variant", "real tokens/s", "vs naive", "peak RSS", "vs naive", "trainable params",
                  "sgemm GFLOP/s in its processes"], rows)


def train_verdicts() -> str:
    s = load("train")["summary"]
    naive = s["naive_full"]
    full = s["prmkit_full"]["tokens_per_s"] / naive["tokens_per_s"]
    packed = s["prmkit_full_packed"]["tokens_per_s"] / naive["tokens_per_s"]
    rss = s["prmkit_full"]["peak_rss_mib"] / naive["peak_rss_mib"]
    lora = s["prmkit_lora"]["tokens_per_s"] / naive["tokens_per_s"]
    use = [s["prmkit_full"]["flop_utilisation"], s["prmkit_full_packed"]["flop_utilisation"]]
    return "\n".join([
        f"- Full fine-tune tokens/s ({goal('train_full_speed')}): **{ratio(full)}, {ratio(packed)} packed: "
        f"{verdict('train_full_speed', full, packed)}**; peak RSS ({goal('train_full_rss')}): **{ratio(rss)}: "
        f"{verdict('train_full_rss', rss)}**.",
        f"- LoRA on every layer ({goal('train_lora_speed')}): **{ratio(lora)}: {verdict('train_lora_speed', lora)}**.",
        f"- FLOP utilisation ({goal('train_utilisation', '')}): **{min(use):.2f} to {max(use):.2f}: "
        f"{verdict('train_utilisation', *use)}**."])


SCORING_METHODS = {
    "per_step_prefix": "one forward per step prefix (earlier tools)",
    "unbatched_one_pass": "one pass per chain, one chain at a time",
    "batched_one_pass": "prmkit: one pass per chain, 16 chains per batch, sorted by length",
    "batched_one_pass_compiled": "prmkit compiled (`compile=True`), after its warm-up",
}


def scoring_table() -> str:
    data = load("scoring")
    chains = data["args"]["chains"]
    rows = []
    for key, label in SCORING_METHODS.items():
        rates = [chains / s for s in data["seconds"][key]]
        rows.append([label, spread(rates)])
    return table(["method", "chains/s, median (min-max) of 3"], rows)


def scoring_verdicts() -> str:
    s = load("scoring")["summary"]
    prefix, unbatched = s["speedup_vs_per_prefix"], s["speedup_vs_unbatched"]
    return (f"Batched against one forward per step prefix ({goal('scoring_vs_prefix')}): **{ratio(prefix)}: "
            f"{verdict('scoring_vs_prefix', prefix)}**. Batched against one chain at a time "
            f"({goal('scoring_vs_unbatched')}): **{ratio(unbatched)}: {verdict('scoring_vs_unbatched', unbatched)}**. "
            f"Compiled against batched eager: {ratio(s['compiled_vs_batched'])}, after a "
            f"{s['compile_warm_up_s']:.0f} s warm-up. Largest score difference between methods: "
            f"{s['max_score_difference']:.1e}.")


GROUP_SHAPES = {"grpo_group_8": "GRPO-like groups of 8", "best_of_16": "best-of-16 groups",
                "no_shared_prompt": "no shared prompt (control)"}


def rate_spread(chains: int, seconds: list[float]) -> str:
    return spread([chains / s for s in seconds], 2)


def prefix_groups_table() -> str:
    now, before = load("prefix_reuse_groups")["results"], load("prefix_reuse")["results"]
    rows = []
    for key, label in GROUP_SHAPES.items():
        n, b = now[key], before[key]
        rows.append([label, rate_spread(n["chains"], n["seconds"]["off"]), rate_spread(n["chains"], n["seconds"]["on"]),
                     bold(ratio(n["speedup"]), key != "no_shared_prompt"), ratio(b["speedup"]),
                     f"{n['tokens_read_off']:,} -> {n['tokens_read_on']:,} ({b['tokens_read_on']:,})"])
    return table(["shape", "chains/s off, now", "chains/s on, now", "speedup now (ratio of medians)", "before",
                  "tokens read off -> on, now (before)"], rows)


def prefix_groups_verdict() -> str:
    now = load("prefix_reuse_groups")["results"]
    two = load("prefix_reuse_groups_2threads")["results"]
    speedups = [now["grpo_group_8"]["speedup"], now["best_of_16"]["speedup"]]
    return (f"Against the target (groups {goal('groups_speedup')}), latest run "
            f"(`prefix_reuse_groups.json`, one thread): **{verdict('groups_speedup', *speedups)}, "
            f"{ratio(speedups[0])} and {ratio(speedups[1])}**; with two threads "
            f"(`prefix_reuse_groups_2threads.json`): {ratio(two['grpo_group_8']['speedup'])} and "
            f"{ratio(two['best_of_16']['speedup'])}, the control {ratio(two['no_shared_prompt']['speedup'])}.")


def vllm_groups_table() -> str:
    scenarios = load("vllm_groups")["scenarios"]
    rows = []
    for key in ("grpo_group_8", "best_of_16"):
        s = scenarios[key]
        cell = {way: f"{rate_spread(s['chains'], s[way]['seconds'])}" for way in
                ("prmkit_whole", "prmkit_reuse", "vllm", "vllm_prefix_cache")}
        vs = s["vs_prmkit_whole"]
        reuse = bold(f"{cell['prmkit_reuse']}, {ratio(vs['prmkit_reuse'])}")
        rows.append([GROUP_SHAPES[key], cell["prmkit_whole"], reuse]
                    + [f"{cell[way]}, {ratio(vs[way])}" for way in ("vllm", "vllm_prefix_cache")])
    return table(["shape (chains/s, median (min-max) of 3)", "prmkit, chains read whole", "prmkit, prompt read once",
                  "vLLM", "vLLM, prefix caching on"], rows)


SEARCH_VARIANTS = {"full": "full", "within_call": "within call", "kept": "kept", "kept_tight": "kept, 256 MiB"}


def prefix_search_table() -> str:
    results = load("prefix_reuse")["results"]
    rows = []
    for key, label in (("beam_search_8_rounds", "beam, 8 rounds"), ("dvts_search_8_rounds", "DVTS, 8 rounds")):
        r = results[key]
        for i, (variant, name) in enumerate(SEARCH_VARIANTS.items()):
            seconds = r["seconds"][variant]
            peak = r["kept_peak_mib"].get(variant)
            rows.append([f"{label} ({r['chains_scored']} chains)" if i == 0 else "", name,
                         spread(seconds, 1), bold(ratio(r["speedup_vs_full"][variant]), variant == "kept"),
                         f"{r['tokens_read'][variant]:,}", f"{peak:,.0f} MiB" if peak else "-"])
    return table(["search", "variant", "PRM s, median (min-max) of 3", "vs full", "tokens read", "kept peak"], rows,
                 "llrrrr")


def prefix_search_verdict() -> str:
    r = load("prefix_reuse")["results"]
    beam, dvts = r["beam_search_8_rounds"], r["dvts_search_8_rounds"]
    gains = [beam["speedup_vs_full"]["kept"], dvts["speedup_vs_full"]["kept"]]
    same = beam["same_choices"] and dvts["same_choices"]
    return (f"Against the target ({goal('search_prm_time')} less PRM time than a full pass): **beam search "
            f"{ratio(gains[0])}, DVTS {ratio(gains[1])}: {verdict('search_prm_time', *gains)}**, "
            f"{'with identical choices' if same else 'but the choices differ'}.")


def serve_table() -> str:
    s = load("serve")["summary"]
    rates = load("serve")["rates"]
    rows = [["one chain at a time, in-process", spread(rates["one_at_a_time"]),
             f"{s['one_at_a_time_cpu_s_per_chain']:.3f}",
             f"{ratio(s['server_vs_one_at_a_time'])} ({ratio(s['server_vs_one_at_a_time_by_cpu'])} by CPU)"],
            ["`score_many`, in-process, batch 16", spread(rates["in_process"]),
             f"{s['in_process_cpu_s_per_chain']:.3f}",
             f"{ratio(s['server_vs_in_process'])} ({ratio(s['server_vs_in_process_by_cpu'])} by CPU)"],
            [bold("`prmkit serve`, 64 clients over HTTP"), bold(spread(rates["server"])),
             bold(f"{s['server_cpu_s_per_chain']:.3f}"), "-"]]
    return table(["variant", "chains/s, median (min-max) of 2", "CPU s per chain", "the server is"], rows)


def serve_verdict() -> str:
    s = load("serve")["summary"]
    ours, single = s["server_vs_in_process"], s["server_vs_one_at_a_time"]
    return (f"Against the targets: **HTTP and batching overhead ({goal('serve_vs_in_process')} in-process "
            f"`score_many`): {ratio(ours)}, {ratio(s['server_vs_in_process_by_cpu'])} by CPU time: "
            f"{verdict('serve_vs_in_process', ours)}. Over one chain at a time ({goal('serve_vs_one_at_a_time')}): "
            f"{ratio(single)}: {verdict('serve_vs_one_at_a_time', single)}.**")


PEER_LABELS = {
    "trl": "TRL PRMTrainer, LoRA r16 all-linear, lr 1e-4",
    "pk-lora": "prmkit LoRA, the same LoRA, lr and separator",
    "pk-lora-random": "prmkit LoRA, the same LoRA, lr and separator, fully random batches (as TRL draws them)",
    "pk-lora-grouped": "prmkit LoRA, length-grouped batches (`training.group_by_length: true`)",
    "pk-lora-compiled": "prmkit LoRA compiled, empty kernel cache",
    "pk-lora-compiled-warm": "prmkit LoRA compiled, warm kernel cache",
    "pk-lora-packed-compiled-warm": "prmkit LoRA compiled and packed, warm kernel cache",
    "soup": "soup-cli, full fine-tune, lr 1e-5",
    "pk-full": "prmkit full fine-tune, lr 1e-5",
    "pk-full-grouped": "prmkit full fine-tune, lr 1e-5, length-grouped batches",
    "pk-full-compiled": "prmkit full compiled, empty kernel cache",
    "pk-full-compiled-warm": "prmkit full compiled, warm kernel cache",
}


def peers_table(name: str) -> str:
    """One peers.py results file: every system's rows/s (median, min-max over its rounds) and its ratio to its peer."""
    data = load(name)
    ratios = data["ratios"]
    rows = []
    for system, s in data["systems"].items():
        rates = [r["rows_per_s"] for r in s["runs"]]
        sgemm = [r.get("sgemm_gflops") for r in s["runs"] if r.get("sgemm_gflops")]
        pair = next((key for key in ratios if key.startswith(f"{system} / ")), None)
        versus = "-"
        if pair:
            r = ratios[pair]
            per_round = r.get("rows_per_s_per_round", [r["rows_per_s"]])
            rounds = "" if len(per_round) == 1 else f" (rounds {min(per_round):.2f}-{max(per_round):.2f}x)"
            versus = f"{ratio(r['rows_per_s'])} rows/s{rounds}, {ratio(r['peak_rss'])} RSS"
        rows.append([PEER_LABELS[system], spread(rates), f"{s['peak_rss_gb']:.2f} GB",
                     f"{min(sgemm):.0f}-{max(sgemm):.0f}" if sgemm else "not recorded", versus])
    return table(["system", "rows/s, median (min-max)", "peak RSS", "sgemm GFLOP/s", "vs its peer"], rows)


def peer_ratio(name: str, pair: str, key: str = "rows_per_s") -> float:
    return load(name)["ratios"][pair][key]


# The runs each peer verdict may be judged on, newest first: the interleaved run of today's peers.py once it
# exists (bench/results/peers.json), else the latest older single run that measured the pair.
LORA_RUNS = [("peers", "pk-lora / trl"), ("peers_packed_compiled", "pk-lora-random / trl"),
             ("peers_compiled", "pk-lora-random / trl"), ("peers_grouping", "pk-lora-random / trl")]
FULL_RUNS = [("peers", "pk-full / soup"), ("peers_compiled", "pk-full / soup"),
             ("peers_fused_adamw", "pk-full-grouped / soup"), ("peers_grouping", "pk-full-grouped / soup")]


def judged(runs: list[tuple[str, str]]) -> tuple[dict, str, list[str]]:
    """The newest run's comparison, a note on how it was measured, and the older runs' ratios."""
    present = [(name, pair) for name, pair in runs if (RESULTS / f"{name}.json").is_file()]
    (name, pair), older = present[0], present[1:]
    compared = load(name)["ratios"][pair]
    rounds = compared.get("rows_per_s_per_round", [compared["rows_per_s"]])
    how = (f"ratio of medians over {len(rounds)} interleaved rounds, per-round {min(rounds):.2f}-{max(rounds):.2f}x"
           if len(rounds) > 1 else "one run each")
    return compared, f"`{name}.json`, {how}", [ratio(load(n)["ratios"][p]["rows_per_s"]) for n, p in older]


def peers_latest_table() -> str:
    if not (RESULTS / "peers.json").is_file():
        return ("Not run yet: `bench/results/peers.json` does not exist. Until it does, the verdicts below are judged "
                "on the older single runs.")
    return peers_table("peers")


def peers_verdicts() -> str:
    """The peer targets against the newest run that measured each pair."""
    lora, lora_how, lora_older = judged(LORA_RUNS)
    full, full_how, full_older = judged(FULL_RUNS)
    return "\n".join([
        f"- **LoRA speed ({goal('peer_lora_speed')} TRL): {verdict('peer_lora_speed', lora['rows_per_s'])}, "
        f"{ratio(lora['rows_per_s'])}** ({lora_how}; the older runs gave {', '.join(lora_older)}).",
        f"- **LoRA peak RSS ({goal('peer_lora_rss')} TRL): {verdict('peer_lora_rss', lora['peak_rss'])}, "
        f"{ratio(lora['peak_rss'])}** (eager; compiled below).",
        f"- **Full fine-tune speed ({goal('peer_full_speed')} soup-cli): "
        f"{verdict('peer_full_speed', full['rows_per_s'])}, {ratio(full['rows_per_s'])}** ({full_how}; the older "
        f"runs gave {', '.join(full_older)}, single runs across drift: see below).",
        f"- **Full fine-tune peak RSS ({goal('peer_full_rss')} soup-cli): "
        f"{verdict('peer_full_rss', full['peak_rss'])}, {ratio(full['peak_rss'])}** (eager; compiled below)."])


def compiled_verdicts() -> str:
    latest = "peers_packed_compiled"
    speed = peer_ratio(latest, "pk-lora-compiled-warm / trl")
    packed = peer_ratio(latest, "pk-lora-packed-compiled-warm / trl")
    rss = peer_ratio(latest, "pk-lora-compiled-warm / trl", "peak_rss")
    full_rss = [peer_ratio("peers_compiled", f"{s} / soup", "peak_rss") for s in
                ("pk-full-compiled", "pk-full-compiled-warm")]
    full = [peer_ratio("peers_compiled", f"{s} / soup") for s in ("pk-full-compiled", "pk-full-compiled-warm")]
    return "\n".join([
        f"- **LoRA compiled peak RSS ({goal('compiled_lora_rss')} TRL's): {verdict('compiled_lora_rss', rss)}, "
        f"{ratio(rss)}; speed ({goal('compiled_lora_speed')}): {verdict('compiled_lora_speed', speed, packed)}, "
        f"{ratio(speed)} warm, {ratio(packed)} packed** (`peers_packed_compiled.json`, single runs).",
        f"- **Full fine-tune compiled peak RSS ({goal('peer_full_rss')} soup-cli's): "
        f"{verdict('peer_full_rss', *full_rss)}, {ratio(full_rss[0])} cold and {ratio(full_rss[1])} warm; speed "
        f"({goal('peer_full_speed')}): {verdict('peer_full_speed', *full)}, {ratio(full[0])}-{ratio(full[1])}** "
        "(`peers_compiled.json`, single runs)."])


COMPILE_MODES = {"eager": "eager", "regional": "regional (`training.torch_compile`: one decoder layer compiled, "
                 "reused by all 30)", "whole": "whole model as one graph"}


def compile_steps_table() -> str:
    r = load("compile_steps")["results"]
    rows = []
    for mode, label in COMPILE_MODES.items():
        cold, warm = r.get(f"{mode}-cold", r.get(mode)), r.get(f"{mode}-warm")
        medians = [cold["median_step_s"]] + ([warm["median_step_s"]] if warm else [])
        speedups = [cold["step_speedup_vs_eager"]] + ([warm["step_speedup_vs_eager"]] if warm else [])
        rows.append([label, f"{cold['first_step_s']:.1f} s", f"{warm['first_step_s']:.1f} s" if warm else "-",
                     " / ".join(f"{m:.3f} s" for m in medians), " / ".join(ratio(s) for s in speedups),
                     f"{cold['peak_rss_gib']:.2f} GiB"])
    return table(["mode", "first step, empty cache", "first step, warm cache", "median step (cold / warm run)",
                  "vs eager", "peak RSS"], rows)


RENDERERS = {name: globals()[name] for name in (
    "train_table", "train_verdicts", "scoring_table", "scoring_verdicts", "prefix_groups_table",
    "prefix_groups_verdict", "vllm_groups_table", "prefix_search_table", "prefix_search_verdict", "serve_table",
    "serve_verdict", "peers_verdicts", "compiled_verdicts", "compile_steps_table", "peers_latest_table")}
RENDERERS.update({f"{name}_table": (lambda name=name: peers_table(name)) for name in (
    "peers_grouping", "peers_fused_adamw", "peers_compiled", "peers_packed_compiled")})
