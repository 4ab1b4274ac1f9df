"""RESULTS.md sections of the production pass (bench/production.py) and the targets table.

Every figure is computed from one run's results: the production pass (connection kinds,
open loop, scale-out, hot project on two processes) and the comparison pass against the
floor (plain TCP, one pinned worker).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

FLOOR_TODAY = {"create32": 0.26, "read": 0.36, "verify": 0.40}
"""service ÷ floor before the connection work: the figure must not fall below these."""
FLOOR_AIM = 0.5
SIZING_RATES = (100, 500, 1_000, 5_000, 20_000)
PLANNING_SHARE = 0.5
"""Plan machines at half their measured capacity: where the open-loop p99 is measured."""


def _runs(production: dict[str, Any], name: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = production["closed"].get(name, [])
    return runs


def ratio(production: dict[str, Any], name: str, base: str = "tcp") -> float | None:
    """Median over rounds of ``name`` creates/s ÷ ``base`` creates/s measured in the same round."""
    a, b = _runs(production, name), _runs(production, base)
    ratios = [x["rps"] / y["rps"] for x, y in zip(a, b, strict=False) if y["rps"] > 0]
    return statistics.median(ratios) if ratios else None


def p99(production: dict[str, Any], name: str) -> float | None:
    runs = _runs(production, name)
    return statistics.median(r["p99_ms"] for r in runs) if runs else None


def _at_least(value: float | None, need: float) -> bool:
    return value is not None and value >= need


def _at_most(value: float | None, need: float) -> bool:
    return value is not None and value <= need


def _num(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "not measured" if value is None else f"{value:.{digits}f}{unit}"


def issue_targets(
    production: dict[str, Any] | None, compare: dict[str, dict[str, Any]] | None
) -> list[tuple[str, str, str, str, bool, bool]]:
    """(figure, must reach, aim, measured, must met, aim met) for every target of the run."""
    rows: list[tuple[str, str, str, str, bool, bool]] = []
    if production is not None:
        for name, label, must, aim in (
            ("tls", "TLS creates/s ÷ plain-TCP creates/s", 0.85, 0.95),
            ("unix", "Unix-socket creates/s ÷ plain TCP", 0.95, 1.0),
            ("cluster", "3-master cluster creates/s ÷ single Redis", 0.70, 0.90),
        ):
            value = ratio(production, name)
            measured = _num(value) if name in production["kinds"] else "not measured (run with `--cluster`)"
            rows.append(
                (label, f">= {must:.2f}", f">= {aim:.2f}", measured, _at_least(value, must), _at_least(value, aim))
            )
        tls_p99 = p99(production, "tls")
        rows.append(
            (
                f"p99 create, TLS, closed loop {production['connections']} connections",
                "<= 40 ms",
                "<= 20 ms",
                _num(tls_p99, unit=" ms"),
                _at_most(tls_p99, 40.0),
                _at_most(tls_p99, 20.0),
            )
        )
        opened = production["open"]
        tls_open = opened.get("tls", {}).get("p99_ms")
        others = ", ".join(f"{name} {r['p99_ms']:.2f} ms" for name, r in opened.items() if name != "tls")
        rows.append(
            (
                f"p99 create, open loop at half capacity (TLS; {others})",
                "<= 15 ms",
                "<= 5 ms",
                _num(tls_open, unit=" ms"),
                _at_most(tls_open, 15.0),
                _at_most(tls_open, 5.0),
            )
        )
    if compare is not None and all("floor_rps" in compare.get(s, {}) for s in FLOOR_TODAY):
        values = {s: compare[s]["service_rps"] / compare[s]["floor_rps"] for s in FLOOR_TODAY}
        rows.append(
            (
                "service ÷ floor (create32 / read / verify), plain TCP",
                "no lower than " + " / ".join(f"{v:.2f}" for v in FLOOR_TODAY.values()),
                f">= {FLOOR_AIM}",
                " / ".join(f"{v:.2f}" for v in values.values()),
                all(values[s] >= FLOOR_TODAY[s] for s in FLOOR_TODAY),
                all(v >= FLOOR_AIM for v in values.values()),
            )
        )
    elif compare is not None:
        rows.append(("service ÷ floor (create32 / read / verify), plain TCP", "", "", "not measured", False, False))
    if production is not None:
        hot = production["hot"]
        ok = hot["errors"] == 0 and hot["chain_ok"]
        rows.append(
            (
                "hot project, two processes, AOF always",
                "0 errors, 0 forks",
                "",
                f"{hot['errors']} errors, {hot['forks']} forks ({hot['chain']})",
                ok,
                ok,
            )
        )
    return rows


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def targets_markdown(rows: Sequence[tuple[str, str, str, str, bool, bool]]) -> list[str]:
    out = [
        "## Targets",
        "",
        "| figure | must reach | aim | measured | must met? | aim met? |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| {label} | {must} | {aim} | {measured} | {_met(must_ok)} | {_met(aim_ok) if aim else ''} |"
        for label, must, aim, measured, must_ok, aim_ok in rows
    ]
    return [*out, ""]


def production_markdown(production: dict[str, Any]) -> list[str]:
    workers = production["workers"]
    capacity = production["capacity"]
    out = [
        "## Connection kinds (production settings)",
        "",
        f"Each kind has its own redis-server ({production['redis_settings'].get('tls', '')}) and its own service "
        f"(`python service.py serve --workers {workers}`: the web worker count fly.toml sets; unpinned). "
        f"Closed loop, creates over 32 projects, {production['connections']} connections, "
        f"{production['rounds']} round(s) of {production['seconds']:g} s, the kinds alternating round by round "
        f"({production['generator']}). Ratio = median over rounds of the kind's creates/s ÷ plain TCP's in the "
        f"same round. Open loop: bench/loadgen.py at {production['open_share']:.0%} of the kind's median "
        f"creates/s over up to {production['open_connections']} connections for {production['seconds']:g} s "
        "after an unrecorded warm-up at that rate, "
        "each latency measured from the request's due time (no coordinated omission).",
        "",
        "| Redis | creates/s (median) | p50 ms | p99 ms | errors | ratio to plain TCP "
        "| open loop rate/s | open p50 ms | open p99 ms | open max ms | open errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in production["kinds"]:
        runs = production["closed"][kind]
        opened = production["open"].get(kind)
        value = ratio(production, kind)
        open_cells = (
            f"{opened['rate']:,.0f} | {opened['p50_ms']:.2f} | {opened['p99_ms']:.2f} | {opened['max_ms']:.1f} "
            f"| {opened['errors']}"
            if opened
            else " | | | |"
        )
        p50 = statistics.median(r["p50_ms"] for r in runs)
        out.append(
            f"| {production['titles'][kind]} | {capacity[kind]:,.0f} | {p50:.2f} "
            f"| {statistics.median(r['p99_ms'] for r in runs):.2f} | {sum(r['errors'] for r in runs)} "
            f"| {_num(value)} | {open_cells} |"
        )
    out += [""]
    if "tcp-1w" in production["closed"]:
        one, many = capacity["tcp-1w"], capacity["tcp"]
        out += [
            "## Scale-out on this machine",
            "",
            f"Plain TCP, the same Redis and load, measured in the same rounds as above "
            f"({production['connections']} connections):",
            "",
            "| web workers | creates/s (median) | p99 ms | errors | ÷ 1 worker |",
            "|---:|---:|---:|---:|---:|",
            f"| 1 | {one:,.0f} | {p99(production, 'tcp-1w'):.2f} | "
            f"{sum(r['errors'] for r in production['closed']['tcp-1w'])} | 1.00 |",
            f"| {workers} | {many:,.0f} | {p99(production, 'tcp'):.2f} | "
            f"{sum(r['errors'] for r in production['closed']['tcp'])} | {_num(ratio(production, 'tcp', 'tcp-1w'))} |",
            "",
        ]
    hot = production["hot"]
    statuses = ", ".join(f"{code}: {n:,}" for code, n in sorted(hot["statuses"].items()))
    out += [
        "## Hot project on two service processes",
        "",
        f"One project's key, {hot['processes']} `service.py serve --workers 1` processes on different ports and "
        f"the same plain-TCP Redis (AOF always), {hot['connections']} connections split evenly between them "
        f"(bench/loadgen.py, closed loop, {production['seconds']:g} s). Then the project's main chain is walked "
        "in the store from its tip to its first receipt (bench/chain.py) and compared with every 201 answer "
        "received, including those that arrived after the timed window closed (the answers counted below are "
        "the timed window's).",
        "",
        f"- creates/s (both processes): {hot['rps']:,.0f}; p99 (worst process) {hot['p99_ms']:.2f} ms",
        f"- answers: {statuses}; errors: {hot['errors']}"
        + "".join(f"; `{sample}`" for sample in hot.get("error_samples", [])[:3]),
        f"- chain: {hot['chain']} ({'no fork' if hot['chain_ok'] else '**fork or break**'})",
        "",
    ]
    out += sizing_markdown(production)
    return out


def sizing_markdown(production: dict[str, Any]) -> list[str]:
    """Machines for a receipt rate, planned at half the measured TLS capacity (docs/deploy.md)."""
    per_machine = production["capacity"].get("tls", 0.0) * PLANNING_SHARE
    if per_machine <= 0:
        return []
    rows = [f"| {rate:,} | {max(2, math.ceil(rate / per_machine))} |" for rate in SIZING_RATES]
    return [
        "## Sizing",
        "",
        f"Planning figure per web machine: {PLANNING_SHARE:.0%} of the TLS capacity above = "
        f"**{per_machine:,.0f} receipts/s** (the rate at which the open-loop p99 is measured). "
        f"Machines for a rate R: max(2, ⌈R ÷ {per_machine:,.0f}⌉) (fly.toml keeps at least 2 running). "
        "This machine also ran Redis and the load generator on its 2 cores, so a web machine of its own "
        "does at least this.",
        "",
        "| receipts/s | web machines |",
        "|---:|---:|",
        *rows,
        "",
    ]
