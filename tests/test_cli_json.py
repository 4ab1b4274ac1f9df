"""``--json`` of the client verbs ``hash``, ``submit``, ``bundle``, ``attest`` and ``trust-root``: exactly one
JSON document on stdout whatever happens, a usage error included (cli/output.py, cli/main.py),
with ``error.kind`` the library exception's class name; an argument that is no file and not
shaped like a receipt id asks nothing of the service; ``hash --salt`` keeps stdout to the hash
lines; each verb's help names its environment and exit codes on a line each.

Run as ``python -m execution_proof`` subprocesses against a loopback server that counts the
requests it gets and answers what each test sets (tests.servers.serving)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof.cli.main import SERVER_MODULES
from tests.conftest import REPO, free_port
from tests.servers import clean_env, serving

MODULE = (sys.executable, "-m", "execution_proof")
RECEIPT_ID = "rcpt_01M8D2AV7NHB8HP9811GDZDKQQ"
NOT_FOUND = (404, orjson.dumps({"ok": False, "error": {"code": "not_found", "message": "no such receipt"}}))


def cli(*args: str, env: dict[str, str | None] | None = None, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*MODULE, *args], cwd=REPO, env=clean_env(env), capture_output=True, timeout=60, check=False, input=stdin
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    )


def one_document(done: subprocess.CompletedProcess[str]) -> Any:
    """stdout as exactly one JSON document (orjson refuses anything after it)."""
    assert done.stdout.strip(), f"nothing on stdout; stderr: {done.stderr}"
    return orjson.loads(done.stdout)


def failure(done: subprocess.CompletedProcess[str], kind: str, code: int) -> dict[str, Any]:
    """The failure document of ``done``: ok false, ``error.kind`` ``kind``, exit ``code``."""
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    document = one_document(done)
    assert isinstance(document, dict), document
    assert document["ok"] is False, document
    assert document["error"]["kind"] == kind, document
    assert isinstance(document["error"]["message"], str) and document["error"]["message"], document
    return document


class Service:
    """A loopback server that records each request and answers ``replies[path]`` (else 404
    ``not_found`` with the service's error body)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.replies: dict[str, tuple[int, bytes]] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self) -> None:
                with outer.lock:
                    outer.requests.append(f"{self.command} {self.path}")
                status, body = outer.replies.get(self.path, NOT_FOUND)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def service() -> Iterator[tuple[Service, str]]:
    fake = Service()
    with serving(fake.server) as url:
        yield fake, url


# --- arguments: no such file asks nothing ------------------------------------------------------


def test_bundle_of_a_mistyped_file_name_asks_nothing(service: tuple[Service, str], tmp_path: Path) -> None:
    fake, url = service
    for argument in ("s2.tar.reciept.json", "rcpt_01m8d2av7nhb8hp9811gdzdkqq", RECEIPT_ID[:-1], "../s2.tar"):
        text = cli("bundle", argument, env={"SERVICE_BASE_URL": url})
        assert text.returncode == 2 and text.stdout == "", text.stdout + text.stderr
        assert f"{argument}: no such file" in text.stderr and "Traceback" not in text.stderr
        as_json = cli("bundle", argument, "--base-url", url, "--json")
        document = failure(as_json, "InvalidInput", 2)
        assert document["error"]["message"].startswith(f"{argument}: no such file"), document
        assert "receipt_id" not in document and document["saved"] is None
    assert fake.requests == [], "nothing went to the network"
    # The counter counts: an argument shaped like a receipt id is asked for.
    asked = cli("bundle", RECEIPT_ID, "--base-url", url, "--json")
    document = failure(asked, "NotFound", 1)
    assert document["receipt_id"] == RECEIPT_ID and document["saved"] is None
    assert fake.requests == [f"GET /v1/receipts/{RECEIPT_ID}/bundle"]


def test_bundle_json_says_each_failure_by_its_kind(service: tuple[Service, str]) -> None:
    fake, url = service
    path = f"/v1/receipts/{RECEIPT_ID}/bundle"
    fake.replies[path] = (401, orjson.dumps({"error": {"code": "unauthorized", "message": "no"}}))
    assert failure(cli("bundle", RECEIPT_ID, "--base-url", url, "--json"), "Unauthorized", 1)["receipt_id"]
    fake.replies[path] = (429, orjson.dumps({"error": {"code": "rate_limited", "message": "slow down"}}))
    failure(cli("bundle", RECEIPT_ID, "--base-url", url, "--json"), "RateLimited", 1)
    fake.replies[path] = (502, b"<html>bad gateway</html>")
    failure(cli("bundle", RECEIPT_ID, "--base-url", url, "--json"), "ServiceError", 2)
    fake.replies[path] = (200, b'{"format": "not a bundle"}')
    failure(cli("bundle", RECEIPT_ID, "--base-url", url, "--json"), "InvalidInput", 2)
    failure(cli("bundle", RECEIPT_ID, "--base-url", f"http://127.0.0.1:{free_port()}", "--json"), "Unreachable", 2)
    https = cli("bundle", RECEIPT_ID, "--base-url", url.replace("http://", "https://"), "--json")
    assert "answers plain HTTP: is the URL an http:// service?" in failure(https, "Unreachable", 2)["error"]["message"]
    unreadable = cli("bundle", "-", "--json", stdin=b"not json")
    assert "standard input" in failure(unreadable, "InvalidInput", 2)["error"]["message"]


def test_attest_asks_nothing_for_no_such_file_and_says_each_failure_by_its_kind(
    service: tuple[Service, str], tmp_path: Path
) -> None:
    """``attest`` reads its argument as ``bundle`` does, and fails as it does; with
    ``--sigstore`` a 409 ``log_pending`` at the end of the wait is ``ProofPending``, exit 1,
    nothing saved."""
    fake, url = service
    for argument in ("s2.tar.reciept.json", RECEIPT_ID[:-1]):
        document = failure(cli("attest", argument, "--base-url", url, "--json"), "InvalidInput", 2)
        assert document["error"]["message"].startswith(f"{argument}: no such file") and document["saved"] is None
    assert fake.requests == [], "nothing went to the network"
    path = f"/v1/receipts/{RECEIPT_ID}/attestation"
    document = failure(cli("attest", RECEIPT_ID, "--base-url", url, "--json"), "NotFound", 1)
    assert document["receipt_id"] == RECEIPT_ID and document["saved"] is None
    assert fake.requests == [f"GET {path}"]
    pending = orjson.dumps({"ok": False, "error": {"code": "log_pending", "message": "not yet"}})
    fake.replies[path + "?format=sigstore"] = (409, pending)
    out = tmp_path / "a.sigstore.json"
    document = failure(
        cli("attest", RECEIPT_ID, "--sigstore", "--base-url", url, "--out", str(out), "--json"), "ProofPending", 1
    )
    assert "nothing saved" in document["error"]["message"] and not out.exists()
    fake.replies[path] = (200, b'{"payloadType": "application/vnd.in-toto+json"}')
    document = failure(cli("attest", RECEIPT_ID, "--base-url", url, "--json"), "InvalidInput", 2)
    assert "exactly payloadType, payload and signatures" in document["error"]["message"]
    fake.replies[path] = (502, b"<html>bad gateway</html>")
    failure(cli("attest", RECEIPT_ID, "--base-url", url, "--json"), "ServiceError", 2)
    failure(cli("attest", RECEIPT_ID, "--base-url", f"http://127.0.0.1:{free_port()}", "--json"), "Unreachable", 2)


# --- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["hash", "--json"],
        ["hash", "f", "--salt-hex", "zz", "--json"],
        ["hash", "f", "--salt", "--salt-hex", "00", "--json"],
        ["submit", "--json"],
        ["submit", "--input", "f", "--kind", "no-such-kind", "--json"],
        ["bundle", "--json"],
        ["bundle", RECEIPT_ID, "--wait", "-1", "--json"],
        ["bundle", RECEIPT_ID, "--no-such-option", "--json"],
        ["attest", "--json"],
        ["attest", RECEIPT_ID, "--wait", "x", "--json"],
        ["trust-root", "--json"],
        ["trust-root", "--out", "x.json", "extra", "--json"],
        ["verify", "--json"],
        ["verfy", "x.json", "--json"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_usage_error_under_json_is_one_json_document(argv: list[str]) -> None:
    done = cli(*argv)
    failure(done, "UsageError", 2)
    assert "usage: execution-proof" in done.stderr, "the usage text stays on stderr"
    plain = cli(*[arg for arg in argv if arg != "--json"])
    assert plain.returncode == 2 and plain.stdout == "" and "usage: execution-proof" in plain.stderr


def test_an_operator_verb_never_answers_json() -> None:
    done = cli("keys", "create", "--json")
    assert done.returncode == 2 and done.stdout == "" and "usage: execution-proof keys create" in done.stderr


# --- hash --------------------------------------------------------------------------------------


def test_hash_salt_keeps_stdout_to_the_hash_lines(tmp_path: Path) -> None:
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_bytes(b"one\n")
    two.write_bytes(b"two\n")
    single = cli("hash", str(one), "--salt")
    assert single.returncode == 0 and re.fullmatch(r"sha256:[0-9a-f]{64}\n", single.stdout), single.stdout
    (salt,) = re.findall(r"^salt: ([0-9a-f]{32})$", single.stderr, re.MULTILINE)
    assert single.stdout.strip() == "sha256:" + hashlib.sha256(bytes.fromhex(salt) + b"one\n").hexdigest()
    assert cli("hash", str(one), "--salt-hex", salt).stdout == single.stdout, "the salt reproduces the hash"

    several = cli("hash", str(one), str(two), "--salt")
    assert several.returncode == 0
    hashes = [line.split("  ") for line in several.stdout.splitlines()]
    assert [path for _, path in hashes] == [str(one), str(two)], several.stdout
    lines = [
        line.removeprefix("salt: ").split("  ") for line in several.stderr.splitlines() if line.startswith("salt: ")
    ]
    salts = {path: salt for salt, path in lines}
    for digest, path in hashes:
        assert digest == "sha256:" + hashlib.sha256(bytes.fromhex(salts[path]) + Path(path).read_bytes()).hexdigest()

    as_json = one_document(cli("hash", str(one), "--salt", "--json"))
    assert as_json["ok"] is True and as_json["path"] == str(one)
    assert as_json["hash"] == "sha256:" + hashlib.sha256(bytes.fromhex(as_json["salt"]) + b"one\n").hexdigest()


def test_hash_json_failures(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent.bin")
    document = failure(cli("hash", absent, "--json"), "InvalidInput", 2)
    assert document["path"] == absent and absent in document["error"]["message"]
    (tmp_path / "here.bin").write_bytes(b"here")
    several = cli("hash", absent, str(tmp_path / "here.bin"), "--json")
    assert several.returncode == 2
    first, second = one_document(several)
    assert first["ok"] is False and first["error"]["kind"] == "InvalidInput" and first["path"] == absent
    assert second == {
        "ok": True,
        "path": str(tmp_path / "here.bin"),
        "hash": "sha256:" + hashlib.sha256(b"here").hexdigest(),
    }
    failure(cli("hash", "-", "-", "--json"), "UsageError", 2)


# --- submit ------------------------------------------------------------------------------------


def test_submit_json_failures(service: tuple[Service, str], tmp_path: Path) -> None:
    fake, url = service
    data = tmp_path / "data.bin"
    data.write_bytes(b"data")
    keyed: dict[str, str | None] = {"SERVICE_API_KEY": "eps_test", "SERVICE_BASE_URL": url}
    no_key = failure(cli("submit", "--input", str(data), "--json", env={"SERVICE_BASE_URL": url}), "UsageError", 2)
    assert "SERVICE_API_KEY" in no_key["error"]["message"] and no_key["saved"] is None
    failure(cli("submit", "--input", "-", "--json", env=keyed), "UsageError", 2)
    unreadable = failure(cli("submit", "--input", str(tmp_path / "absent"), "--json", env=keyed), "InvalidInput", 2)
    assert "absent" in unreadable["error"]["message"]
    failure(cli("submit", "--input", str(data), "--tag", "novalue", "--json", env=keyed), "InvalidInput", 2)
    assert fake.requests == [], "nothing is sent before the arguments are right"

    fake.replies["/v1/receipts"] = (401, orjson.dumps({"error": {"code": "unauthorized", "message": "bad key"}}))
    refused = failure(cli("submit", "--input", str(data), "--json", env=keyed), "Unauthorized", 1)
    assert "POST" in refused["error"]["message"] and "401 unauthorized" in refused["error"]["message"]
    assert fake.requests == ["POST /v1/receipts"]
    plain = cli("submit", "--input", str(data), env=keyed)
    assert plain.returncode == 1 and plain.stdout == "" and "401 unauthorized" in plain.stderr
    unreachable = {**keyed, "SERVICE_BASE_URL": f"http://127.0.0.1:{free_port()}"}
    failure(cli("submit", "--input", str(data), "--json", env=unreachable), "Unreachable", 2)


# --- trust-root --------------------------------------------------------------------------------


def test_trust_root_json_failures(service: tuple[Service, str], tmp_path: Path) -> None:
    fake, url = service
    out = tmp_path / "root.json"
    failure(cli("trust-root", "--out", str(out), "--json", env={"SERVICE_BASE_URL": None}), "UsageError", 2)
    missing_folder = cli("trust-root", "--base-url", url, "--out", str(tmp_path / "no" / "root.json"), "--json")
    assert "does not exist" in failure(missing_folder, "InvalidInput", 2)["error"]["message"]
    no_pem = cli(
        "trust-root", "--base-url", url, "--out", str(out), "--tsa-roots", str(tmp_path / "absent.pem"), "--json"
    )
    assert "--tsa-roots" in failure(no_pem, "InvalidInput", 2)["error"]["message"]
    assert fake.requests == []
    # No log (404), and no keys either (404 not_found): nothing is written, exit 2 (not written).
    refused = failure(cli("trust-root", "--base-url", url, "--out", str(out), "--json"), "NotFound", 2)
    assert refused["saved"] is None and refused["service_url"] == url and not out.exists()
    assert fake.requests == ["GET /v1/log", "GET /v1/public-key"]
    failure(
        cli("trust-root", "--base-url", f"http://127.0.0.1:{free_port()}", "--out", str(out), "--json"),
        "Unreachable",
        2,
    )


# --- help --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "variables"),
    [
        ("hash", []),
        ("submit", ["SERVICE_API_KEY", "SERVICE_BASE_URL"]),
        ("bundle", ["SERVICE_BASE_URL"]),
        ("attest", ["SERVICE_BASE_URL"]),
        ("trust-root", ["SERVICE_BASE_URL"]),
    ],
)
def test_a_client_verbs_help_gives_its_environment_and_exit_codes_a_line_each(verb: str, variables: list[str]) -> None:
    done = cli(verb, "--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    starts = [n for n, line in enumerate(lines) if line.startswith(("environment:", "exit status:"))]
    assert [lines[n].split(":")[0] for n in starts] == ["environment", "exit status"], done.stdout
    environment = " ".join(lines[starts[0] : starts[1]])  # its paragraph, wrapped to the terminal
    exits = " ".join(" ".join(lines[starts[1] :]).split())
    flat = " ".join(done.stdout.split()).replace("show this help message and exit", "")
    assert len(re.findall(r"\bexit\b", flat, re.IGNORECASE)) == 1, "one statement of the exit codes"
    for variable in variables:
        assert variable in environment, variable
    assert re.match(r"exit status: 0 .*; 1 .*; 2 .*; 130 interrupted", exits), exits


# --- the light install -------------------------------------------------------------------------

WITHOUT_SERVER = (
    "import sys\n"
    f"sys.modules.update(dict.fromkeys({list(SERVER_MODULES)!r}))  # None: not installed, as without the extra\n"
    "from execution_proof.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_key_makers_run_without_the_server_extra(tmp_path: Path) -> None:
    """``log-key new`` and ``witness key new`` make keys on the light install (the help says so);
    ``witness serve`` names the extra to install."""

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_SERVER, *argv],
            cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    log_key = run("log-key", "new", "--origin", "log.example/v1/log")
    assert log_key.returncode == 0, log_key.stderr
    assert log_key.stdout.startswith("PRIVATE+KEY+log.example/v1/log+")
    witness = run("witness", "key", "new", "--name", "witness.example")
    assert witness.returncode == 0, witness.stderr
    assert witness.stdout.splitlines()[1].startswith("witness.example+")
    serve = run("witness", "serve", "--key-file", "k", "--state", str(tmp_path / "s"), "--log", "a=b")
    assert serve.returncode == 2 and "`execution-proof witness serve`" in serve.stderr
    assert "execution-proof[server]" in serve.stderr and "Traceback" not in serve.stderr
    assert run("serve").returncode == 2
