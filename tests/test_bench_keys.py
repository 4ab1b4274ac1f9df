"""bench/keys.py's arithmetic and report (the runs themselves are bench/, not tests)."""

from __future__ import annotations

from typing import Any

from bench.keys import ratio_of, render


def run(rps: float, certified: int = 8) -> dict[str, Any]:
    return {"rps": rps, "p99_ms": 10.0, "certified": certified, "refused": 0}


def test_the_ratio_is_the_median_of_the_rounds_ratios() -> None:
    runs = {"token": [run(90), run(100), run(50)], "file": [run(100), run(100), run(100)]}
    figures = ratio_of(runs, "token", "file")
    assert figures["ratio_rounds"] == [0.9, 1.0, 0.5]
    assert figures["ratio"] == 0.9
    assert figures["rounds_token"] == [90, 100, 50] and figures["certified_file"] == [8, 8, 8]


def test_the_report_names_each_phase_and_its_ratio() -> None:
    runs = {"token": [run(97)], "file": [run(100)]}
    logs = {"on": [run(91, 0)], "off": [run(100, 0)]}
    report = {
        "machine": {"cpu": "test cpu"},
        "workers": 2,
        "loadavg_before": "0.1",
        "started": "now",
        "took_s": 60.0,
        "roots": ratio_of(runs, "token", "file"),
        "roots_seconds": 60.0,
        "log": ratio_of(logs, "on", "off"),
        "log_seconds": 60.0,
        "log_published_size": 7,
    }
    text = render(report)
    assert "SoftHSM2 root ÷ `file:` root" in text and "**0.970**" in text
    assert "log on ÷ off, the log key in SoftHSM2" in text and "**0.910**" in text
