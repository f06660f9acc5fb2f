"""What every command module shares: quiet model loading, the scoring flags built from `ScoringOptions`, and
writing a JSON side file. Command modules import this one and nothing else of the command line, so there is no
import cycle."""

from __future__ import annotations

import argparse

# Defaults come from the options dataclasses (light imports: no torch), so each is written once.
from prmkit.scoring.options import DTYPE_NAMES, PRM_FORMATS, ScoringOptions

SCORING_DEFAULTS = ScoringOptions()
ESCAPES = {"\\n": "\n", "\\t": "\t", "\\\\": "\\"}


def quiet_transformers() -> None:
    """Keep loader chatter off screen: transformers' load reports (e.g. 'score.weight newly initialized', which is
    expected here), its weight-loading bar, and deprecation notices peft and transformers trigger in every run.
    Training's progress (prmkit.training.progress) is shown whatever transformers' verbosity."""
    import warnings

    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


def add_scoring_flags(parser: argparse.ArgumentParser) -> None:
    """The `ScoringOptions` fields as flags (`batch_size` = `--batch-size`)."""
    parser.add_argument("--batch-size", type=int, default=SCORING_DEFAULTS.batch_size,
                        help="chains per forward pass (default: %(default)s)")
    parser.add_argument("--max-batch-tokens", type=int, default=SCORING_DEFAULTS.max_batch_tokens,
                        help="padded tokens per forward pass (chains x longest chain); bounds GPU memory on long "
                             "chains (default: no bound beyond --batch-size)")
    parser.add_argument("--device", default=SCORING_DEFAULTS.device,
                        help="cuda, mps or cpu (default: the first available, in that order)")
    parser.add_argument("--dtype", default=SCORING_DEFAULTS.dtype, choices=DTYPE_NAMES,
                        help="weights for inference (auto: bf16/fp16 on GPU, fp32 on CPU)")
    parser.add_argument("--max-length", type=int, default=SCORING_DEFAULTS.max_length,
                        help="tokens read per chain (default: the run's training max_length); steps past it are "
                             "left unscored")
    parser.add_argument("--prm-format", default=SCORING_DEFAULTS.prm_format, choices=PRM_FORMATS,
                        help="how to read the model folder: a prmkit run, or a public PRM (qwen: Qwen2.5-Math-PRM; "
                             "math-shepherd: step tag 'ки', '+'/'-'; rlhflow: each step a user turn; trl: trained "
                             "by TRL's PRMTrainer) (default: detected from its config.json and tokenizer)")
    parser.add_argument("--step-separator", type=unescape, default=SCORING_DEFAULTS.step_separator,
                        help="a trl PRM's step separator, \\n written as \\n: the step_separator it was trained "
                             "with, which TRL does not save (default: TRL's '\\n')")
    parser.add_argument("--compile", action="store_true",
                        help="compile the model with torch.compile (inductor, weights frozen as constants): faster "
                             "forward passes over whole chains after a warm-up of a minute or two on a CPU; needs a "
                             "C++ compiler (CPU) or Triton (GPU); prmkit PRMs only")


def scoring_options(args: argparse.Namespace) -> ScoringOptions:
    return ScoringOptions(device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                          max_batch_tokens=args.max_batch_tokens, max_length=args.max_length,
                          prm_format=args.prm_format, compile=args.compile, step_separator=args.step_separator)


def write_json(path: str | None, payload: dict) -> None:
    """A report beside the printed output, when the user asked for one with --json."""
    if path:
        from prmkit.files import write_json_atomic

        write_json_atomic(path, payload)


def add_problem_flags(parser: argparse.ArgumentParser, defaults, unit: str) -> None:
    """The flags of the commands that sample problems with gold answers (label, rl-filter), from their options
    dataclass `defaults`: which fields hold the problem and its answer, how many `unit` share a generate call, the
    answer checker's processes and timeout, a limit, and starting OUTPUT afresh."""
    parser.add_argument("--problem-field", default=defaults.problem_field,
                        help="the problem's field (default: the first of prompt, problem, question)")
    parser.add_argument("--gold-field", default=defaults.gold_field,
                        help="the gold answer's field (default: gold_answer, else answer; '#### N' is read as N)")
    parser.add_argument("--problems-per-batch", type=int, default=defaults.problems_per_batch,
                        help=f"{unit} whose samples share generate calls (default: %(default)s)")
    parser.add_argument("--checker-workers", type=int, default=defaults.checker_workers,
                        help="processes checking LaTeX answers (default: %(default)s)")
    parser.add_argument("--check-timeout", type=float, default=defaults.check_timeout,
                        help="seconds per answer check; longer counts as wrong (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=defaults.limit, help=f"only the first N {unit}")
    parser.add_argument("--overwrite", action="store_true", help="start OUTPUT afresh instead of continuing it")


def add_generation_flags(parser: argparse.ArgumentParser, *, device_flags: bool = True,
                         logprobs_flag: bool = False) -> None:
    """The `GenerationOptions` fields as flags, for the commands that sample from a policy (label, search,
    rl-filter). A command that also loads a PRM passes device_flags=False and shares the scoring flags'
    --device/--dtype. Only a command that writes the samples' log-probs (search) passes logprobs_flag=True and
    gets --no-logprobs; the others never read them, and sample with `logprobs` off (no extra forward)."""
    from prmkit.generation.options import BACKENDS, GenerationOptions

    defaults = GenerationOptions()
    group = parser.add_argument_group("generation (the policy model)")
    group.add_argument("--backend", default=defaults.backend, choices=BACKENDS,
                       help="transformers (CPU or GPU) or vllm (its own environment: scripts/setup_vllm.sh)")
    group.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                       help="tokens per sample (default: %(default)s)")
    group.add_argument("--temperature", type=float, default=defaults.temperature,
                       help="sampling temperature; 0 is greedy (default: %(default)s)")
    group.add_argument("--top-p", type=float, default=defaults.top_p, help="nucleus sampling (default: %(default)s)")
    group.add_argument("--seed", type=int, default=defaults.seed,
                       help="the same seed and inputs give the same samples (default: %(default)s)")
    group.add_argument("--generation-batch-size", type=int, default=defaults.generation_batch_size,
                       help="sequences per generate call, transformers backend (default: %(default)s)")
    group.add_argument("--system-prompt", default=defaults.system_prompt,
                       help="the policy's system prompt (default: step-by-step, blank line between steps, "
                            "\\boxed{} answer)")
    group.add_argument("--tensor-parallel-size", type=int, default=defaults.tensor_parallel_size,
                       help="vllm: GPUs per model (default: %(default)s)")
    group.add_argument("--no-prefix-caching", dest="enable_prefix_caching", action="store_false",
                       help="vllm: turn off prefix caching")
    group.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization,
                       help="vllm: share of GPU memory to use (default: %(default)s)")
    if logprobs_flag:
        group.add_argument("--no-logprobs", dest="logprobs", action="store_false",
                           help="do not compute each sample's log-prob (the policy-confidence baseline that prmkit "
                                "eval reads): saves one forward per generated batch on the transformers backend")
    else:
        parser.set_defaults(logprobs=False)
    if device_flags:
        group.add_argument("--device", default=defaults.device,
                           help="cuda, mps or cpu (default: the first available, in that order)")
        group.add_argument("--dtype", default=defaults.dtype, choices=DTYPE_NAMES,
                           help="weights for inference (auto: bf16 on GPU, fp32 on CPU)")


def generation_options(args: argparse.Namespace):
    """GenerationOptions from the flags `add_generation_flags` added."""
    from prmkit.generation.options import GenerationOptions

    return GenerationOptions(
        backend=args.backend, max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        seed=args.seed, generation_batch_size=args.generation_batch_size, device=args.device, dtype=args.dtype,
        system_prompt=args.system_prompt or None, tensor_parallel_size=args.tensor_parallel_size,
        enable_prefix_caching=args.enable_prefix_caching, gpu_memory_utilization=args.gpu_memory_utilization,
        logprobs=args.logprobs)


def add_shard_flag(parser: argparse.ArgumentParser, output: str) -> None:
    """--shard for the commands that split their problems over processes (label, search; prmkit.shards)."""
    parser.add_argument("--shard", metavar="I/N",
                        help=f"run shard I of N (0-based): batch b of --problems-per-batch problems goes to shard b "
                             f"mod N, written to {output} with .shard-I-of-N before its suffix; join them with "
                             f"prmkit merge {output} (default: RANK/WORLD_SIZE under torchrun, a SLURM array's or "
                             "a Kubernetes indexed job's index, else one process; see docs/sharding.md)")


def shard_lines(shard, output: str) -> tuple[str, str]:
    """What a shard (prmkit.shards.Shard) says when it starts and when it ends."""
    return (f"shard {shard} (from {shard.source}): batches b with b mod {shard.count} = {shard.index}, into "
            f"{shard.file(output)}",
            f"when all {shard.count} shards are done: prmkit merge {output}")


def launch_device(requested: str | None, backend: str) -> str | None:
    """The device of a label or search process. Under torchrun each process takes the GPU of its LOCAL_RANK, as
    `prmkit score` does (scoring.distributed.rank_device): "cuda" alone is GPU 0 in every process. The vLLM
    backend keeps what was asked: it runs where CUDA_VISIBLE_DEVICES points it (docs/sharding.md), and asking
    torch about GPUs first would give this process the CUDA context that vLLM's fork must not inherit."""
    from prmkit.device import launch_from_env

    launch = launch_from_env()
    if backend != "transformers" or not launch.distributed:
        return requested
    import torch

    from prmkit.scoring.distributed import rank_device

    return rank_device(requested, launch, torch.cuda.is_available())


def unescape(text: str) -> str:
    """`\\n`, `\\t` and `\\\\` typed on a command line as the characters they name (a step delimiter)."""
    out, i = [], 0
    while i < len(text):
        pair = text[i:i + 2]
        out.append(ESCAPES.get(pair, text[i]))
        i += 2 if pair in ESCAPES else 1
    return "".join(out)
