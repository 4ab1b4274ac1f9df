"""RESULTS.md: the report of one run (``Report``), its tables and the earlier targets (ratio
to the bare Sanic ceiling, now retired: the targets table of bench/production_report.py
compares the service with the floor and across Redis connection kinds)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.production_report import issue_targets, production_markdown, targets_markdown

SCENARIO_TITLES = {
    "create32": "create, 32 projects",
    "hot": "create, 1 hot project",
    "read": "public read",
    "verify": "verify",
}
RATIO_TARGETS = {"create32": 0.40, "hot": 0.25, "read": 0.50, "verify": 0.30}
P99_CREATE32_TARGET_MS = 25.0
BYTES_PER_RECEIPT_TARGET = 1000.0
PRELOAD_TOLERANCE = 0.10
PROJECTS = 32


def memory_markdown(memory: dict[str, Any]) -> list[str]:
    """The "Redis memory per receipt" section."""
    out = [
        "## Redis memory per receipt",
        "",
        f"`INFO memory` used_memory grew by {_fmt(memory['delta'])} bytes for "
        f"{memory['count']:,} receipts written through the service's issue path over {PROJECTS} projects "
        f"(bench/preload.py): **{_fmt(memory['bytes_per_receipt'])} bytes per receipt**, all keys "
        "included. `MEMORY USAGE` of every key of each kind a receipt writes to:",
        "",
        "| key | keys | bytes per key (mean) | bytes per receipt |",
        "|---|---:|---:|---:|",
    ]
    rows = memory["breakdown"]
    out += [f"| {kind} | {keys:,} | {_fmt(mean)} | {_fmt(share)} |" for kind, keys, mean, share in rows]
    out += [
        f"| sum of the above | | | {_fmt(sum(row[3] for row in rows))} |",
        "",
        "The rest of the delta is Redis's own per-key bookkeeping (main dictionary growth and "
        "allocator rounding). Per-project and per-window keys (project, counters) are not per receipt.",
        "",
    ]
    return out


def summarise(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """Per scenario: medians over rounds, total errors, and the median of per-round ratios."""
    summary = {}
    for scenario, by_target in results.items():
        service, ceiling = by_target["service"], by_target["ceiling"]
        ratios = [s["rps"] / c["rps"] for s, c in zip(service, ceiling, strict=True) if c["rps"] > 0]
        summary[scenario] = {
            "service_rps": statistics.median(r["rps"] for r in service),
            "service_p50_ms": statistics.median(r["p50_ms"] for r in service),
            "service_p99_ms": statistics.median(r["p99_ms"] for r in service),
            "service_errors": sum(r["errors"] for r in service),
            "service_requests": sum(r["requests"] for r in service),
            "ceiling_rps": statistics.median(r["rps"] for r in ceiling),
            "ceiling_p50_ms": statistics.median(r["p50_ms"] for r in ceiling),
            "ceiling_p99_ms": statistics.median(r["p99_ms"] for r in ceiling),
            "ceiling_errors": sum(r["errors"] for r in ceiling),
            "ratio": statistics.median(ratios) if ratios else 0.0,
            "service_statuses": _merge_statuses(service),
        }
        floor = by_target.get("floor")
        if floor:
            floor_ratios = [f["rps"] / c["rps"] for f, c in zip(floor, ceiling, strict=True) if c["rps"] > 0]
            summary[scenario]["floor_rps"] = statistics.median(r["rps"] for r in floor)
            summary[scenario]["floor_ratio"] = statistics.median(floor_ratios) if floor_ratios else 0.0
    return summary


def _merge_statuses(runs: Sequence[dict[str, Any]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for run in runs:
        for code, n in run["statuses"].items():
            merged[code] = merged.get(code, 0) + n
    return merged


# --------------------------------------------------------------------------- report


def _fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def target_rows(summary: dict[str, dict[str, Any]], bytes_per_receipt: float | None) -> list[tuple[str, str, bool]]:
    rows = []
    for scenario, need in RATIO_TARGETS.items():
        if scenario not in summary:
            continue
        s = summary[scenario]
        label = f"{SCENARIO_TITLES[scenario]}: ratio to ceiling >= {need:.2f}"
        ok = s["ratio"] >= need
        measured = f"{s['ratio']:.2f}"
        if scenario == "hot":
            label += ", zero errors"
            ok = ok and s["service_errors"] == 0
            measured += f", {s['service_errors']} errors"
        rows.append((label, measured, ok))
    if "create32" in summary:
        p99 = summary["create32"]["service_p99_ms"]
        rows.append(
            (
                f"p99 create (32 projects) <= {P99_CREATE32_TARGET_MS:.0f} ms",
                f"{p99:.2f} ms",
                p99 <= P99_CREATE32_TARGET_MS,
            )
        )
    if bytes_per_receipt is not None:
        rows.append(
            (
                f"Redis bytes per receipt <= {BYTES_PER_RECEIPT_TARGET:.0f}",
                _fmt(bytes_per_receipt),
                bytes_per_receipt <= BYTES_PER_RECEIPT_TARGET,
            )
        )
    return rows


def throughput_table(summary: dict[str, dict[str, Any]]) -> list[str]:
    with_floor = any("floor_ratio" in s for s in summary.values())
    lines = [
        "| scenario | service rps | p50 ms | p99 ms | errors | ceiling rps | ceiling p50 ms | ceiling p99 ms "
        "| ratio | target | met? |" + (" floor rps | floor ratio |" if with_floor else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if with_floor else ""),
    ]
    for scenario, s in summary.items():
        need = RATIO_TARGETS[scenario]
        ok = s["ratio"] >= need and (scenario != "hot" or s["service_errors"] == 0)
        target = f">= {need:.2f}" + (", 0 errors" if scenario == "hot" else "")
        lines.append(
            f"| {SCENARIO_TITLES[scenario]} | {_fmt(s['service_rps'])} | {s['service_p50_ms']:.2f} "
            f"| {s['service_p99_ms']:.2f} | {s['service_errors']} | {_fmt(s['ceiling_rps'])} "
            f"| {s['ceiling_p50_ms']:.2f} | {s['ceiling_p99_ms']:.2f} | {s['ratio']:.2f} | {target} | {_met(ok)} |"
            + floor_cells(s, with_floor)
        )
    return lines


def floor_cells(s: dict[str, Any], with_floor: bool) -> str:
    if "floor_ratio" in s:
        return f" {_fmt(s['floor_rps'])} | {s['floor_ratio']:.2f} |"
    return " | |" if with_floor else ""


def rounds_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    lines = [
        "| scenario | round | target | rps | p50 ms | p99 ms | requests | errors | statuses |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for scenario, by_target in results.items():
        for name, runs in by_target.items():
            for number, run in enumerate(runs, 1):
                statuses = ", ".join(f"{code}: {n}" for code, n in run["statuses"].items())
                lines.append(
                    f"| {scenario} | {number} | {name} | {_fmt(run['rps'])} | {run['p50_ms']:.2f} "
                    f"| {run['p99_ms']:.2f} | {run['requests']} | {run['errors']} | {statuses} |"
                )
    return lines


def comparison_rows(
    empty: dict[str, dict[str, Any]], full: dict[str, dict[str, Any]], bytes_empty: float, bytes_full: float
) -> list[tuple[str, float, float, float, bool]]:
    """(figure, empty, preloaded, change, within tolerance): |change| <= 10 %, either way.

    Symmetric on purpose: a figure that moves by more than 10 % in either direction between
    the two passes means the store size matters, or the machine's load changed between them
    (a measurement to repeat), and neither may count as "within 10 %"."""
    rows = []
    for scenario in empty:
        e, f = empty[scenario], full[scenario]
        for key, label in (
            ("service_rps", "rps"),
            ("service_p50_ms", "p50 ms"),
            ("service_p99_ms", "p99 ms"),
            ("ratio", "ratio"),
        ):
            a, b = float(e[key]), float(f[key])
            change = (b - a) / a if a else 0.0
            ok = abs(change) <= PRELOAD_TOLERANCE
            rows.append((f"{SCENARIO_TITLES[scenario]}: {label}", a, b, change, ok))
    change = (bytes_full - bytes_empty) / bytes_empty if bytes_empty else 0.0
    rows.append(("Redis bytes per receipt", bytes_empty, bytes_full, change, abs(change) <= PRELOAD_TOLERANCE))
    return rows


@dataclass
class Report:
    started: str
    command: str
    machine: dict[str, Any]
    setup_notes: list[str]
    load_before: str
    load_after: str
    busy_before: float
    busy_after: float
    generator: str
    generator_ceiling: dict[str, Any]
    sizes: dict[str, int]
    memory: dict[str, Any]
    empty: dict[str, dict[str, list[dict[str, Any]]]]
    preloaded: dict[str, dict[str, list[dict[str, Any]]]] | None
    preload_info: dict[str, Any] | None
    quick: bool
    duration_s: float = 0.0
    production: dict[str, Any] | None = None

    def issue_targets(self) -> list[tuple[str, str, str, str, bool, bool]]:
        return issue_targets(self.production, summarise(self.empty) if self.empty else None)

    def targets(self) -> list[tuple[str, str, bool]]:
        rows = target_rows(summarise(self.empty), self.memory["bytes_per_receipt"])
        if self.preloaded is not None and self.preload_info is not None:
            within = all(
                ok
                for *_, ok in comparison_rows(
                    summarise(self.empty),
                    summarise(self.preloaded),
                    self.memory["bytes_per_receipt"],
                    self.preload_info["bytes_per_receipt"],
                )
            )
            rows.append(
                (
                    f"{self.preload_info['count']:,} receipts stored: every figure within 10 % of the empty store",
                    "see the comparison",
                    within,
                )
            )
        return rows

    def markdown(self) -> str:
        m = self.machine
        out = [
            "# Benchmark results",
            "",
            f"- Date: {self.started} (took {self.duration_s:.0f} s)",
            f"- Command: `{self.command}`",
            f"- Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, Linux {m['kernel']}",
            f"- Software: Python {m['python']}, Sanic {m['sanic']}, {m['redis']}",
            f"- Generator: {self.generator}"
            + (f" ({m['wrk']})" if self.generator == "wrk" and m.get("wrk") else " (bench/loadgen.py)"),
            f"- Machine load: load average {self.load_before} before, {self.load_after} after; "
            f"CPU busy while the benchmark was idle: {self.busy_before:.0%} before, {self.busy_after:.0%} after",
            *(f"- {note}" for note in self.setup_notes),
            "",
        ]
        if self.quick:
            out += ["**Quick smoke run: figures are indicative only.**", ""]
        if self.busy_before > 0.15 or self.busy_after > 0.15:
            out += [
                "**The machine was shared with other work during this run** (see the CPU-busy figures above): "
                "the figures are noisy and must be re-measured on a quiet machine before they are trusted.",
                "",
            ]
        out += targets_markdown(self.issue_targets())
        if self.production is not None:
            out += production_markdown(self.production)
        out += [
            "## Ratio to the ceiling (earlier targets, retired)",
            "",
            "The comparison pass: plain TCP, one pinned worker, against the bare Sanic ceiling and the floor.",
            "",
            "| target | measured | met? |",
            "|---|---|---|",
        ]
        out += [f"| {label} | {measured} | {_met(ok)} |" for label, measured, ok in self.targets()]
        out += [
            "",
            "## Throughput and latency (empty store)",
            "",
            "Median over rounds of requests per second and of each run's p50/p99; errors summed over rounds "
            "(non-2xx answers, connection errors, timeouts); ratio = median over rounds of service rps / "
            "ceiling rps measured in the same round.",
            "",
            *throughput_table(summarise(self.empty)),
            "",
        ]
        gc = self.generator_ceiling
        out += [
            "## Generator's own ceiling",
            "",
            f"The same generator against a trivial asyncio HTTP responder (bench/loadgen.py `null-server`, "
            f"pinned like the servers): {_fmt(gc['rps'])} rps, p50 {gc['p50_ms']:.2f} ms, p99 {gc['p99_ms']:.2f} ms. "
            + self._generator_note(),
            "",
            *memory_markdown(self.memory),
            "Response sizes the ceiling imitates (bytes, measured on the service): "
            + ", ".join(f"{k} {v}" for k, v in self.sizes.items()),
            "",
        ]
        if self.preloaded is not None and self.preload_info is not None:
            p = self.preload_info
            out += [
                f"## With {p['count']:,} receipts stored",
                "",
                f"Preloaded through the service's issue path over {p['projects']} further projects in "
                f"{p['seconds']:.0f} s ({_fmt(p['count'] / p['seconds'])} receipts/s, {p['processes']} processes); "
                f"used_memory grew by {_fmt(p['delta'])} bytes: {_fmt(p['bytes_per_receipt'])} bytes per receipt. "
                f"Redis used_memory after: {_fmt(p['used_after'] / 2**20)} MiB.",
                "",
                *throughput_table(summarise(self.preloaded)),
                "",
                "Comparison with the empty store (within 10 % = moved by at most 10 % either way; a bigger move "
                "in either direction is a difference the store size made or a change in the machine's load "
                "between the passes, so the ratio, measured against the ceiling in the same round, is the "
                "figure to trust on a shared machine):",
                "",
                "| figure | empty store | preloaded | change | within 10 %? |",
                "|---|---:|---:|---:|---|",
            ]
            for label, a, b, change, ok in comparison_rows(
                summarise(self.empty),
                summarise(self.preloaded),
                self.memory["bytes_per_receipt"],
                p["bytes_per_receipt"],
            ):
                out.append(f"| {label} | {a:,.2f} | {b:,.2f} | {change:+.1%} | {_met(ok)} |")
            out += [""]
        out += ["## Every run", "", "Empty store:", "", *rounds_table(self.empty), ""]
        if self.preloaded is not None:
            out += ["Preloaded store:", "", *rounds_table(self.preloaded), ""]
        return "\n".join(out)

    def _generator_note(self) -> str:
        summary = summarise(self.empty)
        top = max((s["ceiling_rps"] for s in summary.values()), default=0.0)
        if top and self.generator_ceiling["rps"] < 1.5 * top:
            return (
                f"**Warning**: that is less than 1.5x the fastest ceiling run ({_fmt(top)} rps): the generator may "
                "limit the ceiling figures, which would flatter the ratios."
            )
        return f"The fastest ceiling run ({_fmt(top)} rps) stays well below it, so the generator is not the bottleneck."
