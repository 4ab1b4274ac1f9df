"""``service.py submit`` against a real service process, blinded commitments (``verify --salt``)
and the request examples of docs/templates.md (each accepted by ``POST /v1/receipts``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof import hash_file
from execution_proof.cli.main import main
from execution_proof.client import http
from tests.conftest import REPO, auth
from tests.servers import create_key_cli, run_cli, service_pool_fixture

service_factory = service_pool_fixture()

INPUT_BYTES = b"confidential input: do not upload \x00\x01\x02"
OUTPUT_BYTES = b"the output file bytes"


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, bytes]]:
    """Every request the client library sends (method, URL, body), sent on to the service."""
    requests: list[tuple[str, str, bytes]] = []
    send = http.HttpClient.request

    def request(self: http.HttpClient, method: str, url: str, *, body: bytes | None = None, headers: Any = None) -> Any:
        requests.append((method, url, body or b""))
        return send(self, method, url, body=body, headers=headers)

    monkeypatch.setattr(http.HttpClient, "request", request)
    return requests


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name, data in (("input.tar", INPUT_BYTES), ("output.bin", OUTPUT_BYTES), ("params.json", b"{}")):
        path = tmp_path / name
        path.write_bytes(data)
        made[name] = path
    return made


@pytest.mark.slow
def test_submit_sends_only_hashes_saves_a_receipt_that_verifies(
    redis_url: str,
    service_factory: Any,
    files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    recorded: list[tuple[str, str, bytes]],
) -> None:
    service = service_factory.start(redis_url=redis_url)
    created = create_key_cli(redis_url)
    monkeypatch.setenv("SERVICE_API_KEY", created["api_key"])
    args = [
        "submit",
        "--input", str(files["input.tar"]),
        "--output", str(files["output.bin"]),
        "--params", str(files["params.json"]),
        "--kind", "release",
        "--tag", "template=release.v1",
        "--tag", "subject_version=1.2.3=rc",
        "--code-ref", "commit-abc123",
        "--run-id", "run-7",
        "--base-url", service.base_url,
    ]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out

    [(method, url, content)] = recorded
    assert method == "POST" and url == service.base_url + "/v1/receipts"
    body = orjson.loads(content)
    assert body == {
        "input_hash": hash_file(files["input.tar"]),
        "output_hash": hash_file(files["output.bin"]),
        "params_hash": hash_file(files["params.json"]),
        "receipt_kind": "release",
        "code_ref": "commit-abc123",
        "run_id": "run-7",
        "tags": {"template": "release.v1", "subject_version": "1.2.3=rc"},
    }, "only hashes and the labels the user gave"
    assert INPUT_BYTES not in content and OUTPUT_BYTES not in content
    assert b"input.tar" not in content and b"output.bin" not in content, "no file names"
    assert str(files["input.tar"].parent).encode() not in content, "no paths"

    saved = Path(str(files["input.tar"]) + ".receipt.json")
    document = orjson.loads(saved.read_bytes())
    receipt_id = document["receipt"]["receipt_id"]
    assert document["ok"] is True and set(document) >= {"receipt", "idempotency", "chain", "quota"}
    assert document["service_url"] == service.base_url and "salts" not in document
    assert f"receipt: {receipt_id}" in out and f"saved:   {saved}" in out
    assert f"verify:  {service.base_url}/verify?receipt_id={receipt_id}" in out

    checked = run_cli(
        "verify", str(saved),
        "--input", str(files["input.tar"]),
        "--output", str(files["output.bin"]),
        "--base-url", service.base_url,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Verdict: VALID" in checked.stdout

    # The same submission again is a replay (200): the same receipt, saved in the same place.
    assert main(args) == 0
    assert "an earlier receipt for the same request" in capsys.readouterr().out
    assert orjson.loads(saved.read_bytes())["receipt"]["receipt_id"] == receipt_id

    # A different receipt for the same input never overwrites the saved one.
    other = ["submit", "--input", str(files["input.tar"]), "--run-id", "run-8", "--base-url", service.base_url]
    assert main(other) == 0
    second_id = re.search(r"receipt: (rcpt_\w+)", capsys.readouterr().out).group(1)  # type: ignore[union-attr]
    assert orjson.loads(saved.read_bytes())["receipt"]["receipt_id"] == receipt_id
    assert Path(f"{files['input.tar']}.{second_id}.receipt.json").exists()

    # --save, and the whole command as a subprocess.
    target = files["input.tar"].parent / "elsewhere.json"
    done = run_cli(
        "submit", "--input", str(files["output.bin"]), "--save", str(target),
        env={"SERVICE_API_KEY": created["api_key"], "SERVICE_BASE_URL": service.base_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert orjson.loads(target.read_bytes())["receipt"]["input_hash"] == hash_file(files["output.bin"])

    # API errors exit 1 and name the error code; the key never appears in the output.
    refused = run_cli(
        "submit", "--input", str(files["input.tar"]), "--tag", "contact=someone@example.com",
        env={"SERVICE_API_KEY": created["api_key"], "SERVICE_BASE_URL": service.base_url},
    )  # fmt: skip
    assert refused.returncode == 1
    assert "400 forbidden_content" in refused.stderr and created["api_key"] not in refused.stderr
    bad_key = run_cli(
        "submit", "--input", str(files["input.tar"]), "--base-url", service.base_url,
        env={"SERVICE_API_KEY": "eps_" + "A" * 43},
    )  # fmt: skip
    assert bad_key.returncode == 1 and "401 unauthorized" in bad_key.stderr


@pytest.mark.slow
def test_submit_usage_and_io_errors_exit_2(files: dict[str, Path], tmp_path: Path) -> None:
    env = {"SERVICE_API_KEY": "eps_" + "A" * 43, "SERVICE_BASE_URL": "http://127.0.0.1:9"}
    no_key = run_cli("submit", "--input", str(files["input.tar"]))
    assert no_key.returncode == 2 and "SERVICE_API_KEY" in no_key.stderr
    missing = run_cli("submit", "--input", str(tmp_path / "absent.bin"), env=env)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    for bad in ("novalue", "=v", "k=", "k"):
        done = run_cli("submit", "--input", str(files["input.tar"]), "--tag", bad, env=env)
        assert done.returncode == 2 and "--tag" in done.stderr, bad
    twice = run_cli("submit", "--input", str(files["input.tar"]), "--tag", "a=1", "--tag", "a=2", env=env)
    assert twice.returncode == 2
    unreachable = run_cli("submit", "--input", str(files["input.tar"]), env=env)
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr
    assert run_cli("submit", "--input", str(files["input.tar"]), "--kind", "workflow_audit", env=env).returncode == 2
    assert run_cli("submit", env=env).returncode == 2, "--input is required"


# --- blinded commitments -------------------------------------------------------------------


@pytest.mark.slow
async def test_verify_checks_a_salted_input_hash(
    client: Any, api_key: dict[str, Any], files: dict[str, Path], tmp_path: Path
) -> None:
    hashed = run_cli("hash", str(files["input.tar"]), "--salt")
    assert hashed.returncode == 0
    salted_hash = hashed.stdout.strip()  # stdout: the hash alone; the salt is on stderr
    salt = next(line.split()[1] for line in hashed.stderr.splitlines() if line.startswith("salt: "))
    assert salted_hash == "sha256:" + hashlib.sha256(bytes.fromhex(salt) + INPUT_BYTES).hexdigest()
    assert salted_hash != hash_file(files["input.tar"])
    _, response = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": salted_hash}), headers=auth(api_key)
    )
    saved = tmp_path / "salted.receipt.json"
    saved.write_bytes(response.body)
    pinned = tmp_path / "keys.json"
    _, published = await client.get("/v1/public-key")  # the service's keys, pinned
    pinned.write_bytes(published.body)
    base = ["verify", str(saved), "--keys", str(pinned), "--input", str(files["input.tar"])]
    good = run_cli(*base, "--salt", salt)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "local file hash (salted)" in good.stdout
    assert run_cli(*base).returncode == 1, "without the salt the hash does not match"
    assert run_cli(*base, "--salt", "00" + salt).returncode == 1, "a wrong salt does not match"
    assert run_cli(*base, "--salt", "not-hex").returncode == 2
    assert run_cli("verify", str(saved), "--keys", str(pinned), "--salt", salt).returncode == 2, "needs --input"


def test_readme_explains_blinded_commitments() -> None:
    text = (REPO / "README.md").read_text()
    assert "Blinded commitments" in text and "--salt" in text


# --- docs/templates.md ---------------------------------------------------------------------


def template_examples() -> list[dict[str, Any]]:
    text = (REPO / "docs" / "templates.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    return [orjson.loads(block) for block in blocks]


def test_templates_doc_has_an_example_per_template() -> None:
    examples = template_examples()
    assert sorted(e["receipt_kind"] for e in examples) == ["audit_pack", "document", "release"]
    release = next(e for e in examples if e["receipt_kind"] == "release")
    assert set(release["tags"]) >= {"template", "subject_name", "subject_type", "subject_version", "subject_ref"}
    generic = {"event_type", "artifact_type", "workflow_stage", "actor_role", "event_at", "template_version"}
    for example in examples:
        if example["receipt_kind"] != "release":
            assert set(example["tags"]) >= generic, example["receipt_kind"]
    audit = next(e for e in examples if e["receipt_kind"] == "audit_pack")
    assert "audit_scope" in audit["tags"]


@pytest.mark.parametrize("kind", ["release", "document", "audit_pack"])
async def test_each_template_example_is_accepted(client: Any, api_key: dict[str, Any], kind: str) -> None:
    example = next(e for e in template_examples() if e["receipt_kind"] == kind)
    _, response = await client.post("/v1/receipts", content=orjson.dumps(example), headers=auth(api_key))
    assert response.status_code == 201, response.text
    receipt = response.json["receipt"]
    assert receipt["receipt_kind"] == kind and receipt["tags"] == example["tags"]
    assert receipt["input_hash"] == example["input_hash"].lower()
