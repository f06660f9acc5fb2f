"""The server's options, the reward rules it shares with PRMReward, the OpenRLHF response clean-up, the command
line's errors, and the TRL client's contract (seen as async, clear errors), all without a model."""

from __future__ import annotations

import asyncio
import inspect
import pickle

import pytest

from prmkit.cli import main
from prmkit.errors import PRMError
from prmkit.serving.clients import RemotePRMReward
from prmkit.serving.options import ServeOptions
from prmkit.serving.wire import chain_reward, strip_end_tokens


def test_options_report_every_problem_by_name():
    with pytest.raises(PRMError) as err:
        ServeOptions(aggregate="median", truncated="drop", port=70000, max_wait_ms=-1, max_steps=0,
                     queue_limit=10, max_request_chains=20)
    message = str(err.value)
    for part in ("aggregate='median'", "truncated='drop'", "port=70000", "max_wait_ms=-1", "max_steps=0",
                 "queue_limit=10 is below max_request_chains=20"):
        assert part in message


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.8.0.1", True), ("localhost", True),
                                           ("::1", True), ("0.0.0.0", False), ("::", False),
                                           ("192.168.1.5", False), ("example.org", False)])
def test_loopback_detection(host, loopback):
    assert ServeOptions(host=host).loopback is loopback


def test_chain_reward_rules_match_prm_reward():
    assert chain_reward([0.9, 0.2, 0.7], "min", 0.0, "kept") == pytest.approx(0.2)
    assert chain_reward([0.9, None], "min", 0.0, "kept") == pytest.approx(0.9)  # cut steps left out
    assert chain_reward([0.9, None], "min", -1.0, "floor") == -1.0  # a cut chain gets the floor
    assert chain_reward([], "mean", 0.5, "kept") == 0.5  # nothing scored: the floor
    assert chain_reward([None, None], "last", 0.0, "kept") == 0.0
    assert chain_reward([-0.5, 0.5], "geometric_mean", 0.25, "kept") == 0.25  # undefined: the floor


def test_strip_end_tokens_removes_trailing_eos_and_padding_only():
    assert strip_end_tokens("a\n\nb</s></s>  ", ("</s>",)) == "a\n\nb"
    assert strip_end_tokens("a</s>b", ("</s>",)) == "a</s>b"
    assert strip_end_tokens("a<|im_end|>\n<pad>", ("<|im_end|>", "<pad>")) == "a"
    assert strip_end_tokens("a", ()) == "a"


def test_remote_reward_is_an_async_reward_function_for_trl():
    reward = RemotePRMReward("http://127.0.0.1:9", aggregate="mean")
    # GRPOTrainer asks inspect (TRL 1.x), older code asks asyncio; both must say "async" on every Python
    assert inspect.iscoroutinefunction(reward) and asyncio.iscoroutinefunction(reward)
    assert reward.__name__ == "prm_mean" and RemotePRMReward("http://x", name="step_prm").__name__ == "step_prm"
    copy = pickle.loads(pickle.dumps(reward))
    assert isinstance(copy, RemotePRMReward) and copy.__name__ == "prm_mean" and inspect.iscoroutinefunction(copy)
    assert copy.url == reward.url and copy.aggregate == "mean"
    with pytest.raises(PRMError, match="aggregate='median'"):
        RemotePRMReward("http://x", aggregate="median")
    with pytest.raises(PRMError, match="truncated='drop'"):
        RemotePRMReward("http://x", truncated="drop")
    with pytest.raises(PRMError, match="2 prompts for 1 completions"):
        asyncio.run(reward(prompts=["a", "b"], completions=["c"]))


def test_remote_reward_names_an_unreachable_server():
    reward = RemotePRMReward("http://127.0.0.1:9", timeout_s=5)  # port 9 (discard): nothing listens
    with pytest.raises(PRMError, match="cannot reach http://127.0.0.1:9"):
        asyncio.run(reward(prompts=["p"], completions=["a step"]))
    assert asyncio.run(reward(prompts=["p"], completions=["  "])) == [0.0]  # no step: not even sent


def test_remote_reward_token_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("PRMKIT_SERVE_TOKEN", "from-env")
    assert RemotePRMReward("http://x").token == "from-env"
    assert RemotePRMReward("http://x", token="given").token == "given"


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "point to a prmkit run folder" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--truncated", "drop"]) == 2
    assert "truncated='drop'" in capsys.readouterr().err
