"""The mc and omega plans on their own: which steps they measure, how many rollouts they cost, the labels."""

from __future__ import annotations

import math

import pytest

from prmkit.labeling.methods import max_rollouts, mc, omega


def drive(plan, hits_for):
    """Run a plan to its labels; `hits_for(step)` is how many rollouts from that step reach the gold answer."""
    asked = []
    try:
        request = plan.send(None)
        while True:
            asked.append(list(request))
            request = plan.send([hits_for(step) for step in request])
    except StopIteration as done:
        return done.value, asked


def test_mc_measures_every_step_but_the_last_and_keeps_soft_and_hard():
    labels, asked = drive(mc(4, False, k=8, label="soft"), {0: 8, 1: 3, 2: 0}.get)
    assert asked == [[0, 1, 2]]  # one request: all prefixes go into one generate call
    assert labels.values == [1.0, 0.375, 0.0, 0.0]
    assert labels.hard == [1, 1, 0, 0]
    assert labels.labels == labels.values
    hard, _ = drive(mc(4, True, k=8, label="hard"), {0: 8, 1: 3, 2: 0}.get)
    assert hard.labels == [1, 1, 0, 1]  # the last step is the solution's own answer, right here
    single, asked = drive(mc(1, True, k=8, label="soft"), lambda step: 0)
    assert asked == [] and single.labels == [1.0]


@pytest.mark.parametrize("steps", range(1, 12))
def test_omega_finds_the_first_failing_step_in_log2_rounds(steps):
    for first_error in range(steps):
        labels, asked = drive(omega(steps, False, k=4, after_error="negative"),
                              lambda step, e=first_error: 2 if step < e else 0)
        assert labels.first_error == first_error
        assert labels.labels == [1] * first_error + [0] * (steps - first_error)
        assert all(len(request) == 1 for request in asked)  # one prefix per round: a binary search
        assert len(asked) <= math.ceil(math.log2(steps)) if steps > 1 else asked == []
        assert len(asked) * 4 <= max_rollouts("omega", steps, 4)
        for request in asked:  # measured steps keep their MC value
            assert labels.values[request[0]] == (0.5 if request[0] < first_error else 0.0)


def test_omega_after_error_null_and_correct_solutions_cost_nothing():
    labels, _ = drive(omega(6, False, k=4, after_error="null"), lambda step: 1 if step < 2 else 0)
    assert labels.labels == [1, 1, 0, None, None, None]
    right, asked = drive(omega(6, True, k=4, after_error="negative"), lambda step: 0)
    assert asked == [] and right.labels == [1] * 6 and right.first_error == -1


def test_max_rollouts():
    assert max_rollouts("mc", 5, 8) == 32
    assert max_rollouts("omega", 5, 8) == 24  # ceil(log2 5) = 3 rounds
    assert max_rollouts("omega", 1, 8) == 0
