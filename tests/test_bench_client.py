"""bench/client.py's pieces: the receipt it signs in process really verifies offline against
the key set it saves (so its timing is of a passing verify), a failing command is reported,
not timed, and one run (on a fake sigstore, nothing installed) prints every verb's and import's
figure in both the markdown and the JSON line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import client
from tests.servers import verify_cli


def test_the_benchs_receipt_verifies_offline_against_its_saved_keys(tmp_path: Path) -> None:
    inputs = client.make_inputs(tmp_path)
    done = verify_cli(str(inputs["receipt"]), "--keys", str(inputs["keys"]), "--input", str(inputs["file"]))
    assert done.returncode == 0, done.stdout + done.stderr
    tampered = inputs["receipt"].read_text().replace('"stage":"bench"', '"stage":"other"')
    assert tampered != inputs["receipt"].read_text()
    (tmp_path / "tampered.json").write_text(tampered)
    assert verify_cli(str(tmp_path / "tampered.json"), "--keys", str(inputs["keys"])).returncode == 1


def test_a_failing_command_is_reported_not_timed(tmp_path: Path) -> None:
    ok = client.wall_times([sys.executable, "-c", "pass"], 2, tmp_path)
    assert isinstance(ok, client.Timed) and len(ok.wall_s) == len(ok.cpu_s) == 2
    assert all(t > 0 for t in ok.wall_s + ok.cpu_s)
    failed = client.wall_times([sys.executable, "-c", "raise SystemExit('no httpx here')"], 2, tmp_path)
    assert failed == "exit 1: no httpx here"


def write_script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def fake_install(python: Path, requirement: str, failed: list[str]) -> dict[str, Any]:
    return {
        "python": str(python), "requirement": requirement, "failed": failed,
        "distributions": {"sigstore": "9.9.9"}, "count": 1, "mb": 1.0, "whole_du_mb": 2.0, "install_s": 0.1,
    }  # fmt: skip


@pytest.mark.slow
def test_the_bench_times_every_verb_and_import_beside_sigstores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without installing anything: the light venv is this one, sigstore's a tiny fake (a
    package that imports, a console script that exits 0) whose pin "did not install"."""
    fake = tmp_path / "sigstore-venv"
    for module in ("__init__", "sign", "verify"):
        (fake / "lib" / "sigstore").mkdir(parents=True, exist_ok=True)
        (fake / "lib" / "sigstore" / f"{module}.py").write_text("")
    python = write_script(fake / "bin" / "python", f'PYTHONPATH={fake / "lib"} exec {sys.executable} "$@"\n')
    write_script(fake / "bin" / "sigstore", "exit 0\n")
    installs = {
        "empty_mb": 0.0,
        "wheel": "fake.whl",
        "light": fake_install(Path(sys.executable), "fake.whl", []),
        "sigstore": fake_install(python, "sigstore", ["`pip install sigstore==4.5.1` exited 1: no such version"]),
    }
    monkeypatch.setattr(client, "light_installs", lambda folder, sigstore: installs)
    assert client.main(["--runs", "1"]) == 0
    markdown, line = capsys.readouterr().out.rstrip().rsplit("\n", 1)
    summary = orjson.loads(line)

    sigstore = "sigstore venv (sigstore 9.9.9, the newest available: 4.5.1 did not install)"
    assert summary["sigstore"] == {"requested": "sigstore==4.5.1", "installed": "9.9.9", "pinned": False}
    assert "`pip install sigstore==4.5.1` exited 1: no such version" in markdown
    imports = summary["imports_s"]
    assert set(imports) == {client.LIGHT, sigstore}
    ours = imports[client.LIGHT]
    assert set(ours) == {"import execution_proof", "from execution_proof import Client, verify, hash_file"}
    assert ours["import execution_proof"]["target_s"] == 0.060
    for figure in [*ours.values(), *imports[sigstore].values()]:
        assert isinstance(figure["s"], float), figure
    assert all(isinstance(figure["met"], bool) for figure in ours.values())
    assert set(imports[sigstore]) == {"import sigstore", "from sigstore import sign, verify"}
    assert all(figure["met"] is None for figure in imports[sigstore].values())

    verbs = [f"execution-proof {verb}" for verb in ("--version", "--help", "hash FILE")]
    verbs += ["execution-proof verify RECEIPT --keys KEYS.json"]
    verbs += [f"execution-proof {verb} --help" for verb in ("bundle", "submit", "trust-root", "monitor")]
    sigstores = ["sigstore --version", "sigstore --help", "sigstore verify --help", "sigstore sign --help"]
    timings = summary["timings_median_s"]
    for where, labels in [(client.CHECKOUT, verbs), (client.LIGHT, verbs), (sigstore, sigstores)]:
        for label in labels:
            assert isinstance(timings[where][label], float), (where, label, timings[where][label])
            assert f"| `{label}` | {where} | {timings[where][label]:.3f} |" in markdown
    for statement in [*ours, *imports[sigstore]]:
        assert f"| `{statement}` |" in markdown
    assert summary["skipped"] == {}


def test_no_install_names_what_it_skipped(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_venvs(folder: Path, sigstore: bool) -> None:
        raise AssertionError("--no-install made a venv")

    monkeypatch.setattr(client, "light_installs", no_venvs)
    monkeypatch.setattr(client, "wall_times", lambda *args: client.Timed([0.01], [0.01]))
    assert client.main(["--no-install"]) == 0
    markdown, line = capsys.readouterr().out.rstrip().rsplit("\n", 1)
    summary = orjson.loads(line)
    assert summary["imports_s"] == {} and summary["sigstore"] is None
    assert set(summary["timings_median_s"]) == {client.CHECKOUT}
    assert "execution-proof monitor --help" in summary["timings_median_s"][client.CHECKOUT]
    assert set(summary["skipped"].values()) == {"`--no-install`"}
    assert "Import time: not measured (`--no-install`)." in markdown
    assert "Not measured: the light venv and sigstore's (`--no-install`)." in markdown


def test_sigstore_falls_back_to_the_newest_when_the_pin_does_not_install(tmp_path: Path) -> None:
    """A fake python whose pip has no sigstore==4.5.1."""
    python = write_script(
        tmp_path / "bin" / "python",
        'case "$5" in sigstore==*) echo "ERROR: No matching distribution found for $5" >&2; exit 1;; esac\n',
    )
    requirement, _took, failed = client.pip_install_first(python, ["sigstore==4.5.1", "sigstore"])
    assert requirement == "sigstore"
    assert failed == [
        "`pip install sigstore==4.5.1` exited 1: ERROR: No matching distribution found for sigstore==4.5.1"
    ]
    with pytest.raises(SystemExit, match=r"sigstore==4\.5\.1"):
        client.pip_install_first(python, ["sigstore==4.5.1"])
