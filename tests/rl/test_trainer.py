"""ProcessGRPOTrainer inside a real TRL GRPOTrainer run: a tiny policy, a fake PRM with chosen step scores, and the
advantages TRL's loss receives checked against the formula, token by token."""

from __future__ import annotations

import pytest

trl = pytest.importorskip("trl", reason="TRL is not installed; the README's test command installs prmkit[rl]")

from prmkit.data.records import split_steps
from prmkit.errors import PRMError
from prmkit.rl.advantages import char_ends, group_advantages, token_ends
from prmkit.scoring.inputs import completion_text

SEPARATOR = " "  # the tiny policy writes spaces often, so its completions have several steps of unequal length
MAX_READ = 3  # the fake PRM "cuts" every step after the third, as max_length would


class FakePRM:
    """PRMReward's interface with chosen scores: a step scores (its length mod 5) / 4; steps past MAX_READ are None."""

    __name__ = "fake_prm"
    floor, aggregate, truncated, separator = 0.0, "min", "kept", SEPARATOR

    def __init__(self):
        self.calls = 0
        self.seen: list[str] = []  # every completion text the PRM was asked about

    @staticmethod
    def scores_of(text: str) -> list[float | None] | None:
        steps = split_steps(text, SEPARATOR)
        return [(len(s) % 5) / 4 if j < MAX_READ else None for j, s in enumerate(steps)] or None

    def step_scores_many(self, prompts, completions):
        self.calls += 1
        texts = [completion_text(c) for c in completions]  # a chat message list reads as its content, as PRMReward's
        self.seen += texts
        return [self.scores_of(t) for t in texts]


def expected_advantages(tokenizer, rows: list[list[int]], rule: str, g: int, scale: str = "rms") -> list[list[float]]:
    """The formula, from the completion ids alone: floor for unread steps, one floor step for no step."""
    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=True)

    out = []
    for start in range(0, len(rows), g):
        rewards, ends, lengths = [], [], []
        for ids in rows[start:start + g]:
            text = decode(ids)
            steps = split_steps(text, SEPARATOR) or [text]
            rewards.append([0.0 if s is None else s for s in (FakePRM.scores_of(text) or [None])])
            ends.append(token_ends(ids, char_ends(text, steps), decode))
            lengths.append(len(ids))
        out += group_advantages(rewards, ends, lengths, [0.0] * len(lengths), rule, scale=scale)
    return out


@pytest.mark.parametrize(("rule", "scale"), [("sum", "rms"), ("min", "rms"), ("sum", "none")])
def test_a_grpo_step_trains_on_per_token_advantages_from_the_step_scores(tiny_llama, tmp_path, rule, scale):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer

    seen = []

    class Recording(ProcessGRPOTrainer):
        def _compute_loss(self, model, inputs):
            seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_ids", "completion_mask")})
            return super()._compute_loss(model, inputs)

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    prm = FakePRM()
    args = ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                             num_generations=4, max_completion_length=24, logging_steps=1, report_to=[],
                             save_strategy="no", temperature=1.0, seed=0, bf16=False, advantage_rule=rule,
                             advantage_scale=scale)
    prompts = ["Tom has 3 apples and buys 2 more.", "A train goes 60 km in 1 hour."]
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(tiny_llama), prm=prm, args=args,
                        train_dataset=Dataset.from_dict({"prompt": prompts * 2}), processing_class=tokenizer)
    trainer.train()

    assert seen and prm.calls == 1
    batch = seen[0]
    adv, ids, mask = batch["advantages"], batch["completion_ids"], batch["completion_mask"]
    assert adv.dim() == 2 and adv.shape == ids.shape  # (B, T): one advantage per completion token
    rows = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    # the batch is one prompt's 4 completions, so TRL's shuffling within the batch keeps the group whole
    expected = expected_advantages(tokenizer, rows, rule, g=4, scale=scale)
    for i, values in enumerate(expected):
        assert adv[i, :len(values)].tolist() == pytest.approx(values, abs=1e-5)
        assert not adv[i, len(values):].any()  # padding carries no advantage
    assert any(len(set(v)) > 1 for v in expected), "no completion had tokens of different advantage"
    log = next(e for e in trainer.state.log_history if "process/steps_per_completion" in e)
    # seed 0 gives long completions: some had steps past MAX_READ, so the floor rule for unread steps was used
    assert log["process/steps_per_completion"] > 1 and 0 < log["process/truncated_share"] <= 1
    # the loss's own advantages are logged, per token: their root mean square (1 under the rms scale) and largest
    flat = [v for values in expected for v in values]
    assert log["process/advantage_rms"] == pytest.approx((sum(v * v for v in flat) / len(flat)) ** 0.5, abs=1e-5)
    assert log["process/advantage_abs_max"] == pytest.approx(max(abs(v) for v in flat), abs=1e-5)
    assert log["process/zero_advantage_group_share"] == 0.0
    if scale == "rms":
        assert log["process/advantage_rms"] == pytest.approx(1.0, abs=1e-5)


def test_the_config_rejects_an_unknown_rule_and_a_negative_outcome_weight(tmp_path):
    from prmkit.rl import ProcessGRPOConfig

    with pytest.raises(PRMError, match=r"advantage_rule='mean' is not known; use one of sum, min, outcome.*"
                                       r"outcome_weight=-1.0 is negative"):
        ProcessGRPOConfig(output_dir=str(tmp_path), advantage_rule="mean", outcome_weight=-1.0)
    with pytest.raises(PRMError, match=r"advantage_scale='std' is not known; use one of rms, none"):
        ProcessGRPOConfig(output_dir=str(tmp_path), advantage_scale="std")


def test_a_completion_with_no_step_is_one_floor_step_and_unread_steps_get_the_floor(tokenizer):
    from types import SimpleNamespace

    from prmkit.rl import ProcessGRPOTrainer

    prm = FakePRM()
    me = SimpleNamespace(processing_class=tokenizer, prm=prm, separator=SEPARATOR,
                         args=SimpleNamespace(outcome_weight=0.0, advantage_rule="sum"))
    texts = ["   ", "ab cdef gh ijk lm"]  # blank (no step); five steps of which the PRM reads three
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    pending = {"ids": ids, "texts": texts, "scores": [prm.scores_of(t) for t in texts], "correct": None}
    rewards, ends, lengths, _, empty, cut, _correct = ProcessGRPOTrainer._per_completion(me, pending)
    assert rewards == [[0.0], [0.5, 1.0, 0.5, 0.0, 0.0]]  # len % 5 / 4 for "ab", "cdef", "gh"; floor after
    assert ends[0] == [len(ids[0]) - 1] and ends[1][-1] == len(ids[1]) - 1  # the floor step covers every token
    assert empty == [True, False] and cut == [False, True] and lengths == [len(i) for i in ids]


def test_outcome_rule_gives_every_token_the_normalised_chain_reward_plus_answer_correctness(tiny_llama, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer
    from prmkit.rl.advantages import normalize
    from prmkit.scoring.aggregate import chain_reward

    seen = []

    class Recording(ProcessGRPOTrainer):
        def _compute_loss(self, model, inputs):
            seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_ids", "completion_mask")})
            return super()._compute_loss(model, inputs)

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    args = ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                             num_generations=4, max_completion_length=24, logging_steps=1, report_to=[],
                             save_strategy="no", seed=0, bf16=False, advantage_rule="outcome", outcome_weight=2.0)
    data = Dataset.from_dict({"prompt": ["Tom has 3 apples and buys 2 more."] * 2, "answer": ["5"] * 2})
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(tiny_llama), prm=FakePRM(), args=args,
                        train_dataset=data, processing_class=tokenizer)
    trainer.train()

    adv, ids, mask = seen[0]["advantages"], seen[0]["completion_ids"], seen[0]["completion_mask"]
    texts = [tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=True) for row, m in zip(ids, mask)]
    # a random tiny policy never writes 5 as its answer: correctness is 0, and the chain reward sets the order
    log = next(e for e in trainer.state.log_history if "process/answer_accuracy" in e)
    assert log["process/answer_accuracy"] == 0.0
    chains = [0.0 if FakePRM.scores_of(t) is None else chain_reward(FakePRM.scores_of(t), "min") for t in texts]
    assert len(set(chains)) > 1  # the group has something to prefer
    for i, value in enumerate(normalize(chains)):
        n = int(mask[i].sum())
        assert adv[i, :n].tolist() == pytest.approx([value] * n, abs=1e-5)


def test_answer_correctness_is_checked_against_the_gold_column_and_a_missing_column_is_named():
    from types import SimpleNamespace

    from prmkit.rl import ProcessGRPOTrainer

    me = SimpleNamespace(args=SimpleNamespace(outcome_weight=1.0, answer_column="gold"), _checker=None)
    right, wrong = "3 + 2 = 5 so the answer is 5", "3 + 2 = 6 so the answer is 6"
    assert ProcessGRPOTrainer._correctness(me, [right, wrong], {"gold": ["5", "5"]}) == [1.0, 0.0]
    me._checker.close()
    with pytest.raises(PRMError, match="no column 'gold'; set answer_column="):
        ProcessGRPOTrainer._correctness(me, [right], {"answer": ["5"]})


def test_the_trainer_rejects_its_own_reward_funcs_and_a_remote_prm_without_a_separator(tiny_llama):
    from prmkit.rl import ProcessGRPOTrainer
    from prmkit.serving.clients import RemotePRMReward

    with pytest.raises(PRMError, match="drop reward_funcs="):
        ProcessGRPOTrainer(model=tiny_llama, prm=FakePRM(), reward_funcs=[FakePRM()])
    with pytest.raises(PRMError, match=r"has no separator.*RemotePRMReward\(url, separator="):
        ProcessGRPOTrainer(model=tiny_llama, prm=RemotePRMReward("http://127.0.0.1:1"))


def test_a_grpo_step_with_a_real_trained_prm_uses_its_step_scores(tiny_llama, tiny_run, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer
    from prmkit.scoring.reward import PRMReward

    seen = []

    class Recording(ProcessGRPOTrainer):
        def _compute_loss(self, model, inputs):
            seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_ids", "completion_mask")})
            return super()._compute_loss(model, inputs)

    prm = PRMReward(tiny_run, device="cpu", separator=SEPARATOR)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    args = ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                             num_generations=4, max_completion_length=24, logging_steps=1, report_to=[],
                             save_strategy="no", seed=0, bf16=False, advantage_rule="min")
    prompt = "Tom has 3 apples and buys 2 more."
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(tiny_llama), prm=prm, args=args,
                        train_dataset=Dataset.from_dict({"prompt": [prompt] * 2}), processing_class=tokenizer)
    trainer.train()

    adv, ids, mask = seen[0]["advantages"], seen[0]["completion_ids"], seen[0]["completion_mask"]
    rows = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    texts = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    scores = prm.step_scores_many([prompt] * len(texts), texts)  # what prmkit's PRM says of each step

    def decode(token_ids):
        return tokenizer.decode(token_ids, skip_special_tokens=True)

    rewards = [[0.0 if s is None else s for s in (chain or [None])] for chain in scores]
    ends = [token_ends(r, char_ends(t, split_steps(t, SEPARATOR) or [t]), decode) for r, t in zip(rows, texts)]
    expected = group_advantages(rewards, ends, [len(r) for r in rows], [0.0] * len(rows), "min")
    assert len({s for chain in rewards for s in chain}) > 1
    for i, values in enumerate(expected):
        assert adv[i, :len(values)].tolist() == pytest.approx(values, abs=1e-4)


@pytest.mark.parametrize("field, value, advice", [
    ("scale_rewards", "none", r"always divides by the standard deviation within each group.*leave scale_rewards"),
    ("scale_rewards", False, r"scale_rewards=False is not supported"),
    ("scale_rewards", "batch", r"scale_rewards='batch' is not supported"),
    ("reward_weights", [1.0], r"reward_weights=\[1.0\] is not supported.*outcome_weight="),
    ("multi_objective_aggregation", "normalize_then_sum",
     r"multi_objective_aggregation='normalize_then_sum' is not supported.*outcome_weight="),
])
def test_the_config_refuses_grpo_fields_the_trainer_would_ignore(tmp_path, field, value, advice):
    from prmkit.rl import ProcessGRPOConfig

    with pytest.raises(PRMError, match=advice):
        ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **{field: value})
    # TRL's defaults (and True, its spelling of "group") are what the trainer does, so they pass
    ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, scale_rewards=True)


def test_without_args_the_trainer_builds_a_process_grpo_config_as_trl_builds_its_default(tiny_llama, tmp_path,
                                                                                         monkeypatch):
    import transformers.training_args
    from datasets import Dataset
    from transformers import AutoTokenizer

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer

    # TRL's default config asks for bf16, which TrainingArguments refuses on a machine without a GPU unless told
    # use_cpu; pretend the GPU is there, as it is where the default would be used
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.chdir(tmp_path)
    trainer = ProcessGRPOTrainer(model=str(tiny_llama), prm=FakePRM(), processing_class=AutoTokenizer.from_pretrained(
        tiny_llama), train_dataset=Dataset.from_dict({"prompt": ["Tom has 3 apples."] * 8}))
    assert isinstance(trainer.args, ProcessGRPOConfig)
    assert trainer.args.output_dir == f"{tiny_llama.name}-GRPO" and trainer.args.advantage_rule == "sum"
    assert trainer._correctness(["the answer is 5"], {}) is None  # where a plain GRPOConfig failed: outcome_weight


THOUGHTS = ["<think>\n3 + 12 = 15 so he has 15.\n</think>\n\nThe answer is 15.",
            "<think>\nguess 7\n</think>\n\nHe has 7 apples, so the answer is 7.",
            "<think>\n3 apples and 12 more: 3 + 12 = 15 apples.\n</think>\n\n15",
            "The answer is 15 apples."]


def thinking_rollouts(tokenizer, env_mask: bool = False):
    """A TRL rollout_func that answers each prompt with THOUGHTS in turn: chosen completions through TRL's own
    batch path, as a vLLM server's rollouts would come in."""
    def rollout(prompts, trainer):
        prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                                    return_dict=True)["input_ids"] for p in prompts]
        completion_ids = [tokenizer(THOUGHTS[i % len(THOUGHTS)], add_special_tokens=False)["input_ids"]
                          + [tokenizer.eos_token_id] for i in range(len(prompts))]
        out = {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
               "logprobs": [[0.0] * len(ids) for ids in completion_ids]}
        if env_mask:
            out["env_mask"] = [[1] * len(ids) for ids in completion_ids]
        return out

    return rollout


def reasoning_tokenizer(folder):
    """The tiny tokenizer with Qwen3's chat template and TRL's response parser for it, so TRL splits a completion's
    <think> part out of its content (`reasoning_content`), as it does for a Qwen3 policy."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = qwen3_chat_template
    return add_response_schema(tokenizer)


def test_where_trl_parses_the_reasoning_out_the_prm_reads_the_decoded_text_its_rewards_land_on(tiny_llama,
                                                                                              tmp_path,
                                                                                              monkeypatch):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer

    seen, parsed = [], []

    class Recording(ProcessGRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            parsed.extend(completions)
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

        def _compute_loss(self, model, inputs):
            seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_ids", "completion_mask")})
            return super()._compute_loss(model, inputs)

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL's warning that rollout_func is experimental
    tokenizer = reasoning_tokenizer(tiny_llama)
    prm = FakePRM()
    args = ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                             num_generations=4, max_completion_length=64, logging_steps=1, report_to=[],
                             save_strategy="no", seed=0, bf16=False, advantage_rule="sum")
    prompt = [{"role": "user", "content": "Tom has 3 apples and buys 12 more. How many apples?"}]
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(tiny_llama), prm=prm, args=args,
                        train_dataset=Dataset.from_dict({"prompt": [prompt] * 4}), processing_class=tokenizer,
                        rollout_func=thinking_rollouts(tokenizer))
    trainer.train()

    # TRL handed the reward function the parsed responses: the reasoning split out of the content
    assert sum("reasoning_content" in c[0] for c in parsed) == 3
    adv, ids, mask = seen[0]["advantages"], seen[0]["completion_ids"], seen[0]["completion_mask"]
    rows = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    decoded = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    assert sorted(prm.seen) == sorted(decoded) == sorted(THOUGHTS)  # the text whose steps get the rewards
    for i, values in enumerate(expected_advantages(tokenizer, rows, "sum", g=4)):
        assert adv[i, :len(values)].tolist() == pytest.approx(values, abs=1e-5)


def test_completions_that_hold_text_the_policy_did_not_write_are_refused(tiny_llama, tmp_path, monkeypatch):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer

    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first number
            b: the second number
        """
        return a + b

    for name, value in (("tools", [add]), ("environment_factory", object)):
        with pytest.raises(PRMError, match=f"does not take {name}=: .*the PRM would score the tools' text"):
            ProcessGRPOTrainer(model=str(tiny_llama), prm=FakePRM(), **{name: value})

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL's warning that rollout_func is experimental
    tokenizer = reasoning_tokenizer(tiny_llama)
    args = ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                             num_generations=4, max_completion_length=64, report_to=[], save_strategy="no", seed=0,
                             bf16=False)
    prompt = [{"role": "user", "content": "Tom has 3 apples and buys 12 more. How many apples?"}]
    trainer = ProcessGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_llama), prm=FakePRM(), args=args,
                                 train_dataset=Dataset.from_dict({"prompt": [prompt] * 4}), processing_class=tokenizer,
                                 rollout_func=thinking_rollouts(tokenizer, env_mask=True))
    with pytest.raises(PRMError, match="rollout_func returned an env_mask"):
        trainer.train()
