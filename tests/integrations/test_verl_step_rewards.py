"""prmkit.rl.verl_rewards run through verl's own classes (verl 0.9.1 in .venv-verl, scripts/setup_verl.sh):
loaded by verl's `load_reward_manager`, rewarding a batch laid out as verl's agent loop lays it out, against a real
`prmkit serve` of a tiny PRM. Each step's reward must sit at the response token where the step ends (found here
by scanning decoded prefixes one token at a time), nothing on any other token or on padding, verl's GAE must turn
them into each token's sum of the rewards of the steps that end at or after it, and verl's streaming path (one
number per rollout) must get PRMReward's chain reward."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))

from serve_helpers import LiveServer  # noqa: E402

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.scoring.reward import PRMReward  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402
from prmkit.serving.app import create_app  # noqa: E402
from prmkit.serving.options import ServeOptions  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VERL_PYTHON = REPO / ".venv-verl" / "bin" / "python"
TOL = 1e-5
FLOOR = -1.0  # not 0, so a step the PRM did not read still shows on its end token

pytestmark = pytest.mark.skipif(not VERL_PYTHON.is_file(),
                                reason="no verl environment (.venv-verl); create it with scripts/setup_verl.sh")


def end_tokens(ids: list[int], text_ends: list[int], decode) -> list[int]:
    """Per character end, the first token whose decoded prefix holds the text up to it; the last step takes the
    last token."""
    ends, text = [], decode(ids)
    for end in text_ends:
        k = next(k for k in range(len(ids)) if decode(ids[:k + 1]).startswith(text[:end]))
        ends.append(max(k, ends[-1] if ends else 0))
    return ends[:-1] + [len(ids) - 1] if ends else []


def test_step_rewards_land_on_step_end_tokens_in_verls_token_level_rewards(tiny_run, tmp_path):
    scorer = PRMScorer.from_pretrained(tiny_run, device="cpu", batch_size=8)
    separator = scorer.metadata.separator
    records = generate_records(3, seed=41)
    pairs = [(r["prompt"], separator.join(r["completions"])) for r in records]
    pairs += [(records[0]["prompt"], separator.join(["7 * 2 = 14."] * 40)),  # past the PRM's max_length
              (records[1]["prompt"], "")]  # nothing but the EOS token: no step
    folder = tmp_path / "tokenizer"
    scorer.tokenizer.save_pretrained(folder)
    with LiveServer(create_app(scorer, ServeOptions(max_wait_ms=20))) as url:
        done = subprocess.run([str(VERL_PYTHON), str(REPO / "tests" / "verl_scripts" / "step_rewards.py")],
                              input=json.dumps({"url": url, "tokenizer": str(folder), "floor": FLOOR,
                                                "prompts": [p for p, _ in pairs],
                                                "responses": [r for _, r in pairs]}),
                              text=True, capture_output=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, "\n".join(done.stderr.splitlines()[-30:])
    got = json.loads(done.stdout.strip().splitlines()[-1])

    local = PRMReward(scorer, aggregate="min", floor=FLOOR)
    step_scores = local.step_scores_many([p for p, _ in pairs], [r for _, r in pairs])

    def decode(part):
        return scorer.tokenizer.decode(part, skip_special_tokens=True)

    for i, (ids, row, returns, scores) in enumerate(zip(got["response_ids"], got["rm_scores"], got["returns"],
                                                        step_scores)):
        text = pairs[i][1]
        assert decode(ids) == text
        want = [0.0] * len(ids)
        if not scores:  # no step: the floor at the last token
            want[-1] = FLOOR
        else:
            steps, cursor, text_ends = text.split(separator), 0, []
            for step in steps:
                cursor = text.index(step, cursor) + len(step)
                text_ends.append(cursor)
            for end, score in zip(end_tokens(ids, text_ends[:len(scores)], decode), scores):
                want[end] += FLOOR if score is None else score
        assert row == pytest.approx(want, abs=TOL), f"rollout {i}"
        assert returns == pytest.approx([sum(row[t:]) for t in range(len(row))], abs=TOL)
        assert got["extra_info"][i]["prm_steps"] == len(scores or [])
    assert got["padding_zero"]
    assert sum(1 for v in got["rm_scores"][0] if v != 0) == len(step_scores[0]) >= 2  # one reward per step
    assert got["extra_info"][3]["prm_truncated"] and None in step_scores[3]
    assert got["streamed"] == pytest.approx(local([p for p, _ in pairs], [r for _, r in pairs]), abs=TOL)
    assert got["streamed"][-1] == FLOOR  # no step: the floor
