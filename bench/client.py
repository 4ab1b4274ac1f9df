"""What the client costs a user: ``python -m bench.client`` (about 3 minutes; one command).

1. **Start-up**: the whole-process wall time (fork to exit, as a shell sees it) of each client
   verb: ``execution-proof --version`` and ``--help``, ``hash FILE`` (a one-line file), an
   offline ``verify RECEIPT --keys KEYS.json`` (a receipt signed here, in process, by the
   library's own receipts code, with a fresh key), and the ``--help`` of ``bundle``,
   ``submit``, ``trust-root`` and ``monitor``; plus ``python service.py hash`` and ``python
   service.py verify`` from the checkout for comparison. Each command runs once unrecorded
   (warm-up: the page cache, .pyc files), then ``--runs`` times (default 5); the median is the
   figure. Target: under 0.15 s each.
2. **The light install**: a fresh venv gets this checkout's wheel without extras (``pip wheel
   --no-deps``, then ``pip install`` of that wheel, its dependencies from the registry), and
   another ``pip install sigstore==4.5.1`` (the newest sigstore when the registry has no
   4.5.1; the output says which); each is counted in distributions (without pip, setuptools
   and wheel) and in site-packages size (MB = 10^6 bytes, every file's apparent size, .pyc
   included, minus an empty venv's; and the whole site-packages as ``du`` counts it). The
   verbs are timed again from the light venv, where no server library is installed, and
   sigstore's ``--version``, ``--help``, ``verify --help`` and ``sign --help`` from its venv.
3. **Import time** (docs/python-api.md), in each fresh venv: whole process minus
   ``python -c pass`` of the same interpreter, medians of ``--runs`` after a warm-up, of
   ``import execution_proof`` (target 60 ms) and ``from execution_proof import Client,
   verify, hash_file`` (target 100 ms), beside ``import sigstore`` and ``from sigstore import
   sign, verify``. A missed target is reported, not an error.

Commands in the fresh venvs run without PYTHONPATH or PYTHONHOME (so they import what the
venv installed, not this checkout) and from a scratch folder (``python -c`` puts the working
directory first on sys.path); every timed command runs without PYTHONDONTWRITEBYTECODE, so the
warm-up leaves .pyc files as it does for a user.

Prints a markdown section (bench/RESULTS.md holds it) and a JSON line. ``--no-install``
skips parts 2 and 3 (no registry needed); ``--no-sigstore`` skips only the sigstore venv.
Skipped parts are named in both.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from execution_proof.receipts.ids import new_actor_id, new_project_id, new_receipt_id
from execution_proof.receipts.model import build_receipt, format_created_at, parse_create_request, place_in_chain
from execution_proof.receipts.signing import load_key_ring, new_key_set

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 0.15
IMPORT_TARGETS_S = {
    "import execution_proof": 0.060,
    "from execution_proof import Client, verify, hash_file": 0.100,
}
SIGSTORE_PIN = "4.5.1"
# sigstore 4.x's public API is its two submodules (its __init__ holds only __version__): this
# loads sigstore.sign (SigningContext) and sigstore.verify (Verifier), as a script that signs
# or verifies does.
SIGSTORE_IMPORTS = ("import sigstore", "from sigstore import sign, verify")
NOT_COUNTED = {"pip", "setuptools", "wheel"}
CONFIG_PREFIXES = ("SERVICE_", "REDIS_", "RECEIPT_", "LOG_")
# What would make a fresh venv import this checkout instead of what it installed.
NOT_A_USERS = ("PYTHONPATH", "PYTHONHOME")
INSTALL_TIMEOUT_S = 900
INTERPRETER = "python -c pass (the interpreter alone)"
CHECKOUT = "checkout venv (server extra installed)"
LIGHT = "light venv (no extras)"


def client_env(fresh_venv: bool = False) -> dict[str, str]:
    """The caller's environment without any service configuration (nothing reaches a network)
    and without PYTHONDONTWRITEBYTECODE; for a ``fresh_venv``, without PYTHONPATH and
    PYTHONHOME either."""
    # Without .pyc files written by the warm-up, every run would compile the checkout again.
    dropped = ("PYTHONDONTWRITEBYTECODE", *(NOT_A_USERS if fresh_venv else ()))
    return {k: v for k, v in os.environ.items() if not k.startswith(CONFIG_PREFIXES) and k not in dropped}


def make_inputs(folder: Path) -> dict[str, Path]:
    """A one-line file, a receipt over its hash signed in process, and the key set to pin."""
    line = folder / "artifact.txt"
    line.write_text("one line of build output\n")
    digest = "sha256:" + hashlib.sha256(line.read_bytes()).hexdigest()
    key_set = new_key_set("bench-client")
    keyring = load_key_ring(key_set)
    project_id = new_project_id()
    now_ms = int(time.time() * 1000)
    receipt = build_receipt(
        parse_create_request({"input_hash": digest, "tags": {"stage": "bench"}}),
        receipt_id=new_receipt_id(project_id, now_ms),
        project_id=project_id,
        actor_id=new_actor_id(),
        created_at=format_created_at(now_ms),
        placement=place_in_chain(None, None),
        keyring=keyring,
    )
    receipt_path = folder / "artifact.receipt.json"
    receipt_path.write_bytes(orjson.dumps({"ok": True, "receipt": receipt}))
    keys_path = folder / "keys.json"
    keys_path.write_bytes(orjson.dumps(keyring.public_keys_json()))
    return {"file": line, "receipt": receipt_path, "keys": keys_path}


class Timed(NamedTuple):
    wall_s: list[float]
    cpu_s: list[float]
    """user + system CPU of the process (and its children): less sensitive to a loaded machine."""


def wall_times(command: list[str], runs: int, cwd: Path, env: dict[str, str] | None = None) -> Timed | str:
    """One unrecorded run, then ``runs`` timed ones, in ``env`` (default: ``client_env()``);
    each must exit 0. A command that fails is not timed: its error (the last line it printed)
    is the result."""
    env = client_env() if env is None else env
    timed = Timed([], [])
    for attempt in range(runs + 1):
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(  # noqa: S603 - our own command line
            command, cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
        elapsed = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines() or ["(nothing)"]
            print(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}", file=sys.stderr)
            return f"exit {done.returncode}: {said[-1]}"
        if attempt:
            timed.wall_s.append(elapsed)
            cpu = cpu_after.ru_utime - cpu_before.ru_utime + cpu_after.ru_stime - cpu_before.ru_stime
            timed.cpu_s.append(cpu)
    return timed


def client_verbs(exe: str, inputs: dict[str, Path]) -> dict[str, list[str]]:
    """Every verb of the console script ``exe`` a user starts: the two that work offline on
    real inputs, and the help of the ones that would ask a service."""
    file, receipt, keys = str(inputs["file"]), str(inputs["receipt"]), str(inputs["keys"])
    return {
        "execution-proof --version": [exe, "--version"],
        "execution-proof --help": [exe, "--help"],
        "execution-proof hash FILE": [exe, "hash", file],
        "execution-proof verify RECEIPT --keys KEYS.json": [exe, "verify", receipt, "--keys", keys],
        **{
            f"execution-proof {verb} --help": [exe, verb, "--help"]
            for verb in ("bundle", "submit", "trust-root", "monitor")
        },
    }


def sigstore_verbs(exe: str) -> dict[str, list[str]]:
    """What a comparable sigstore user runs first; none of it reaches a network."""
    return {
        "sigstore --version": [exe, "--version"],
        "sigstore --help": [exe, "--help"],
        "sigstore verify --help": [exe, "verify", "--help"],
        "sigstore sign --help": [exe, "sign", "--help"],
    }


def time_commands(
    python: Path, commands: dict[str, list[str]], runs: int, cwd: Path, env: dict[str, str]
) -> dict[str, Timed | str]:
    """``python -c pass`` (the baseline), then each command, in the order given."""
    timed = {INTERPRETER: wall_times([str(python), "-c", "pass"], runs, cwd, env)}
    timed.update({label: wall_times(command, runs, cwd, env) for label, command in commands.items()})
    return timed


def import_cost_s(timings: dict[str, Timed | str], statement: str) -> float | str:
    """The statement's whole-process median minus ``python -c pass``'s; an error, if either failed."""
    whole, interpreter = timings[statement], timings[INTERPRETER]
    if isinstance(whole, str):
        return whole
    if isinstance(interpreter, str):
        return f"python -c pass failed: {interpreter}"
    return statistics.median(whole.wall_s) - statistics.median(interpreter.wall_s)


def import_figures(timings: dict[str, Timed | str]) -> dict[str, dict[str, Any]]:
    """Each timed statement's cost (``s``: seconds, or the error), its ``target_s`` (ours only)
    and whether it ``met`` it (None without a target or a figure)."""
    figures: dict[str, dict[str, Any]] = {}
    for statement in timings:
        if statement == INTERPRETER:
            continue
        cost, target = import_cost_s(timings, statement), IMPORT_TARGETS_S.get(statement)
        met = None if target is None or isinstance(cost, str) else cost <= target
        figures[statement] = {"s": cost, "target_s": target, "met": met}
    return figures


def run_quiet(command: list[str], cwd: Path) -> str:
    """``command``'s output; SystemExit with its error if it fails. Run as in a fresh venv, from
    ``cwd``: a checkout on sys.path (PYTHONPATH, or the working directory of ``python -m
    pip``) holds the execution_proof.egg-info ``pip wheel`` leaves there, and pip would take
    the light install for done."""
    done = subprocess.run(  # noqa: S603 - our own command line
        command, cwd=cwd, env=client_env(fresh_venv=True), capture_output=True, text=True,
        timeout=INSTALL_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def new_venv(path: Path) -> Path:
    """A fresh venv (the base interpreter's, not this one's packages); its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    run_quiet([base, "-m", "venv", str(path)], path.parent)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = run_quiet([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], python.parent)
    return Path(out.strip())


def tree_bytes(folder: Path, on_disk: bool = False) -> int:
    """Every file's apparent size, or with ``on_disk`` its allocated blocks (what ``du`` says)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                info = path.stat()
                total += info.st_blocks * 512 if on_disk else info.st_size
    return total


def distributions(python: Path) -> dict[str, str]:
    listed = orjson.loads(run_quiet([str(python), "-m", "pip", "list", "--format", "json"], python.parent))
    return {d["name"]: d["version"] for d in listed if d["name"].lower() not in NOT_COUNTED}


def pip_install_first(python: Path, choices: list[str]) -> tuple[str, float, list[str]]:
    """``pip install`` of the first requirement in ``choices`` that installs: that requirement,
    the seconds it took, and why each earlier one failed. None installs: SystemExit with every
    error. Run as ``run_quiet`` runs, from the venv's bin folder."""
    failed: list[str] = []
    for requirement in choices:
        started = time.monotonic()
        done = subprocess.run(  # noqa: S603 - our own command line
            [str(python), "-m", "pip", "install", "-q", requirement], cwd=python.parent,
            env=client_env(fresh_venv=True), capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return requirement, time.monotonic() - started, failed
        said = (done.stderr or done.stdout).strip().splitlines() or ["(nothing)"]
        failed.append(f"`pip install {requirement}` exited {done.returncode}: {said[-1]}")
    raise SystemExit("\n".join(failed))


def measure_install(folder: Path, name: str, choices: list[str], empty_bytes: int) -> dict[str, Any]:
    python = new_venv(folder / name)
    requirement, took, failed = pip_install_first(python, choices)
    dists = distributions(python)
    folder_ = site_packages(python)
    size = tree_bytes(folder_) - empty_bytes
    return {
        "python": str(python),
        "requirement": requirement,
        "failed": failed,
        "distributions": dists,
        "count": len(dists),
        "mb": size / 1e6,
        "whole_du_mb": tree_bytes(folder_, on_disk=True) / 1e6,
        "install_s": took,
    }


def light_installs(folder: Path, sigstore: bool) -> dict[str, Any]:
    """The light venv (``"light"``) and, with ``sigstore``, sigstore's (``"sigstore"``), each
    with its ``"python"``; SystemExit if one does not install."""
    empty = new_venv(folder / "empty")
    empty_bytes = tree_bytes(site_packages(empty))
    wheels = folder / "wheels"
    run_quiet([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)], folder)
    (wheel,) = sorted(wheels.glob("execution_proof-*.whl"))
    out: dict[str, Any] = {"empty_mb": empty_bytes / 1e6, "wheel": wheel.name}
    out["light"] = measure_install(folder, "light", [str(wheel)], empty_bytes)
    if sigstore:
        out["sigstore"] = measure_install(folder, "sigstore", [f"sigstore=={SIGSTORE_PIN}", "sigstore"], empty_bytes)
    return out


def sigstore_where(installs: dict[str, Any]) -> str:
    """The sigstore venv's label: the version installed, and why when it is not the pin."""
    item = installs["sigstore"]
    version = item["distributions"].get("sigstore", "?")
    if item["requirement"] == f"sigstore=={SIGSTORE_PIN}":
        return f"sigstore venv (sigstore {version})"
    return f"sigstore venv (sigstore {version}, the newest available: {SIGSTORE_PIN} did not install)"


def console_script() -> str:
    """``execution-proof`` beside this interpreter (the checkout's venv), else on PATH."""
    beside = Path(sys.executable).parent / "execution-proof"
    found = str(beside) if beside.exists() else shutil.which("execution-proof")
    if found is None:
        raise SystemExit("no execution-proof console script: pip install -e . first")
    return found


def fmt_s(value: float) -> str:
    return f"{value:.3f}"


def import_rows(result: dict[str, Any]) -> list[str]:
    """The import-time table, or why it was not measured."""
    if not result["imports"]:
        return [f"Import time: not measured ({result['skipped']['imports']})."]
    sigstore = any(where.startswith("sigstore") for where in result["imports"])
    lines = [
        "Import time: in each fresh venv, the whole process of `python -c STATEMENT` minus `python -c pass` "
        f"(the same interpreter, the same venv, timed just before), medians of {result['runs']} runs after one "
        "unrecorded warm-up."
        + (
            " `from sigstore import sign, verify` loads sigstore 4.x's public API, its submodules "
            "`sigstore.sign` (SigningContext) and `sigstore.verify` (Verifier), the same modules as "
            "`import sigstore.sign, sigstore.verify`."
            if sigstore
            else ""
        ),
        "",
        "| statement | where | import ms (minus `python -c pass`) | whole process median ms "
        "| `python -c pass` median ms | target ms | |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for where, timings in result["imports"].items():
        interpreter = timings[INTERPRETER]
        base = "fails" if isinstance(interpreter, str) else f"{statistics.median(interpreter.wall_s) * 1000:.0f}"
        for statement, figure in import_figures(timings).items():
            times, cost, target = timings[statement], figure["s"], figure["target_s"]
            if isinstance(cost, str) or isinstance(times, str):
                lines.append(f"| `{statement}` | {where} | fails | | {base} | | **not met**: `{cost}` |")
                continue
            whole = statistics.median(times.wall_s) * 1000
            goal = "" if target is None else f"{target * 1000:.0f}"
            met = {None: "", True: "met", False: "**not met**"}[figure["met"]]
            lines.append(f"| `{statement}` | {where} | {cost * 1000:.0f} | {whole:.0f} | {base} | {goal} | {met} |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    runs = result["runs"]
    lines = [
        f"## The client: start-up and install size (`python -m bench.client`, a separate run, {result['date']})",
        "",
        f"Command: `python -m bench.client` (took {result['took_s']:.0f} s). Machine: {result['machine']}, "
        f"load average {result['load_before']} before, {result['load_after']} after. Python {result['python']}.",
        "",
        *import_rows(result),
        "",
        f"Start-up: whole-process wall time, median of {runs} runs after one unrecorded warm-up; a one-line file; "
        "the receipt signed in process by receipts/ with a fresh key, verified offline against that key set. "
        "The target is ours; sigstore's rows are for comparison.",
        "",
        f"| command | where | median s | min s | max s | CPU s (user+sys), median | target < {TARGET_S} s |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for where, timings in result["timings"].items():
        ours = not where.startswith("sigstore")
        for label, times in timings.items():
            if isinstance(times, str):
                lines.append(f"| `{label}` | {where} | fails | | | | **not met**: `{times}` |")
                continue
            median = statistics.median(times.wall_s)
            met = "" if label == INTERPRETER or not ours else "met" if median < TARGET_S else "**not met**"
            spread = f"{fmt_s(min(times.wall_s))} | {fmt_s(max(times.wall_s))}"
            cpu = fmt_s(statistics.median(times.cpu_s))
            lines.append(f"| `{label}` | {where} | {fmt_s(median)} | {spread} | {cpu} | {met} |")
    lines += [f"\nNot measured: {what} ({why})." for what, why in result["skipped"].items() if what != "imports"]
    installs = result.get("installs")
    if installs:
        lines += [
            "",
            "Install size: a fresh venv each, distributions counted without pip, setuptools and wheel; "
            f"site-packages in MB (10^6 bytes, every file's apparent size, .pyc included) minus an empty "
            f"venv's ({installs['empty_mb']:.1f} MB).",
            "",
            "| install | distributions | site-packages MB "
            "| whole site-packages on disk (du, pip and setuptools included) MB | install took s |",
            "|---|---:|---:|---:|---:|",
        ]
        rows = [("light", f"this checkout's wheel without extras (`{installs['wheel']}`)")]
        if "sigstore" in installs:
            version = installs["sigstore"]["distributions"].get("sigstore", "?")
            rows.append(("sigstore", f"`pip install {installs['sigstore']['requirement']}` ({version})"))
        for key, label in rows:
            item = installs[key]
            sizes = f"{item['mb']:.1f} | {item['whole_du_mb']:.1f}"
            lines.append(f"| {label} | {item['count']} | {sizes} | {item['install_s']:.0f} |")
        failed = installs.get("sigstore", {}).get("failed")
        if failed:
            lines += ["", "sigstore's pin did not install, so the newest sigstore was measured:"]
            lines += [f"- {why}" for why in failed]
        light = installs["light"]["distributions"]
        lines += ["", "The light install's distributions: " + ", ".join(f"{n} {v}" for n, v in sorted(light.items()))]
    return "\n".join(lines) + "\n"


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The JSON line: every median (or a failing command's error), each import's cost against
    its target, the install sizes, the sigstore measured and what was skipped."""
    installs = result.get("installs", {})
    return {
        "timings_median_s": {
            where: {
                label: times if isinstance(times, str) else statistics.median(times.wall_s)
                for label, times in t.items()
            }
            for where, t in result["timings"].items()
        },
        "imports_s": {where: import_figures(timings) for where, timings in result["imports"].items()},
        "installs": {
            key: {"count": value["count"], "mb": round(value["mb"], 1), "whole_du_mb": round(value["whole_du_mb"], 1)}
            for key, value in installs.items()
            if isinstance(value, dict)
        },
        "sigstore": (
            {
                "requested": f"sigstore=={SIGSTORE_PIN}",
                "installed": installs["sigstore"]["distributions"].get("sigstore"),
                "pinned": installs["sigstore"]["requirement"] == f"sigstore=={SIGSTORE_PIN}",
            }
            if "sigstore" in installs
            else None
        ),
        "skipped": result["skipped"],
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{cpu}, {os.cpu_count()} cores"


def measure(folder: Path, runs: int, install: bool, sigstore: bool) -> dict[str, Any]:
    """Every part not skipped; the fresh venvs (and their pip installs) live in ``folder``."""
    inputs = make_inputs(folder)
    checkout_exe = console_script()
    checkout = {
        **client_verbs(checkout_exe, inputs),
        "python service.py hash FILE": [sys.executable, "service.py", "hash", str(inputs["file"])],
        "python service.py verify RECEIPT --keys KEYS.json": [
            sys.executable, "service.py", "verify", str(inputs["receipt"]), "--keys", str(inputs["keys"]),
        ],
    }  # fmt: skip
    checkout_python = Path(checkout_exe).parent / "python"
    timings = {CHECKOUT: time_commands(checkout_python, checkout, runs, REPO, client_env())}
    imports: dict[str, dict[str, Timed | str]] = {}
    skipped: dict[str, str] = {}
    out: dict[str, Any] = {"timings": timings, "imports": imports, "skipped": skipped}
    if not install:
        skipped["imports"] = skipped["the light venv and sigstore's"] = "`--no-install`"
        return out
    installs = out["installs"] = light_installs(folder, sigstore)
    fresh = client_env(fresh_venv=True)
    scratch = folder / "scratch"
    scratch.mkdir()
    venvs = [(LIGHT, "light", tuple(IMPORT_TARGETS_S))]
    if sigstore:
        venvs.append((sigstore_where(installs), "sigstore", SIGSTORE_IMPORTS))
    else:
        skipped["sigstore's venv"] = "`--no-sigstore`"
    for where, key, statements in venvs:
        python = Path(installs[key]["python"])
        exe = str(python.parent / ("execution-proof" if key == "light" else "sigstore"))
        verbs = client_verbs(exe, inputs) if key == "light" else sigstore_verbs(exe)
        timings[where] = time_commands(python, verbs, runs, scratch, fresh)
        statements_ = {s: [str(python), "-c", s] for s in statements}
        imports[where] = time_commands(python, statements_, runs, scratch, fresh)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (after one warm-up)")
    parser.add_argument("--no-install", action="store_true", help="skip the fresh venvs (no registry needed)")
    parser.add_argument("--no-sigstore", action="store_true", help="skip the sigstore venv")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "python": sys.version.split()[0],
        "runs": args.runs,
        "load_before": loadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="eps-bench-client-") as tmp:
        result.update(measure(Path(tmp), args.runs, not args.no_install, not args.no_sigstore))
    result["load_after"] = loadavg()
    result["took_s"] = time.monotonic() - started
    print(markdown(result))
    print(orjson.dumps(summary(result)).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
