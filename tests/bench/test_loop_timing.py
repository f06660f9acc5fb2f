"""bench/loop.py's stage times after a resume: every attempt's seconds count, whether the attempt stopped with an
exception (saved as it stops) or was killed outright (saved by the running stage's clock)."""

import json
import subprocess
import time

import pytest

import loop


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(loop.time, "perf_counter", fake)
    return fake


def saved(work) -> dict:
    return json.loads((work / "state.json").read_text())["stages"]


def test_a_stage_stopped_twice_reports_the_time_of_every_attempt(tmp_path, clock, capsys):
    def interrupted(seconds: float, error: BaseException):
        def run():
            clock.now += seconds
            raise error
        return run

    def finishing():
        clock.now += 20.0
        return {"rows": 3}

    with pytest.raises(KeyboardInterrupt):
        loop.Loop(loop.parse_args(["--work", str(tmp_path)])).stage("label-mc", interrupted(50.0, KeyboardInterrupt()))
    assert saved(tmp_path)["label-mc"] == {"done": False, "seconds_before_resume": 50.0}
    # a new process goes on: a failing subprocess is an attempt too
    failing = interrupted(7.5, subprocess.CalledProcessError(1, "prmkit label"))
    with pytest.raises(subprocess.CalledProcessError):
        loop.Loop(loop.parse_args(["--work", str(tmp_path)])).stage("label-mc", failing)
    assert saved(tmp_path)["label-mc"] == {"done": False, "seconds_before_resume": 57.5}
    entry = loop.Loop(loop.parse_args(["--work", str(tmp_path)])).stage("label-mc", finishing)
    assert entry == {"done": True, "seconds": 77.5, "rows": 3} == saved(tmp_path)["label-mc"]
    assert "== label-mc (continuing; 58 s before)" in capsys.readouterr().out
    # done: not run again, its time unchanged
    again = loop.Loop(loop.parse_args(["--work", str(tmp_path)])).stage("label-mc", interrupted(1.0, AssertionError()))
    assert again["seconds"] == 77.5


def test_a_running_stage_saves_its_time_so_far_for_a_kill_that_no_handler_sees(tmp_path, clock):
    runner = loop.Loop(loop.parse_args(["--work", str(tmp_path)]))
    runner.HEARTBEAT_SECONDS = 0.01
    on_disk = {}

    def run():
        clock.now += 30.0
        deadline = time.monotonic() + 5
        while saved_entry(tmp_path) != {"done": False, "seconds_before_resume": 30.0} and time.monotonic() < deadline:
            time.sleep(0.01)
        on_disk.update(saved_entry(tmp_path))  # what a SIGKILL here would leave for the next run
        clock.now += 5.0
        return {}

    assert runner.stage("search", run)["seconds"] == 35.0
    assert on_disk == {"done": False, "seconds_before_resume": 30.0}
    assert saved(tmp_path)["search"] == {"done": True, "seconds": 35.0}


def saved_entry(work) -> dict:
    try:
        return saved(work).get("search", {})
    except FileNotFoundError:
        return {}
