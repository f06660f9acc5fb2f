"""bench/peers.py's summary of interleaved rounds: medians with min-max, and a comparison as the ratio of medians
with the range of the per-round ratios."""

import peers


def rounds(*rates):
    return [{"wall_s": 240 / rate, "rows_per_s": rate, "peak_rss_gb": 3.0, "sgemm_gflops": 100.0 + i}
            for i, rate in enumerate(rates)]


def test_summary_is_the_median_round_with_its_range():
    summary = peers.summarise(rounds(1.2, 1.0, 1.5))
    assert summary["rows_per_s"] == 1.2 and (summary["rows_per_s_min"], summary["rows_per_s_max"]) == (1.0, 1.5)
    assert summary["sgemm_gflops"] == 101.0 and len(summary["runs"]) == 3


def test_comparison_is_the_ratio_of_medians_and_the_spread_of_each_rounds_ratio():
    ours, peer = peers.summarise(rounds(1.2, 1.1, 1.8)), peers.summarise(rounds(1.0, 1.0, 1.5))
    compared = peers.compare(ours, peer)
    assert compared["rows_per_s"] == 1.2  # medians 1.2 / 1.0
    assert compared["rows_per_s_per_round"] == [1.2, 1.1, 1.2]
    assert (compared["rows_per_s_min"], compared["rows_per_s_max"]) == (1.1, 1.2)
    assert compared["peak_rss"] == 1.0
