"""Signer URIs (runtime/signers.py): keys made and used inside a real SoftHSM2 token, never
extractable, across a fork and threads, with the PIN never shown; plugins run as real
executables whose answers are checked; ``file:``/``env:`` keys and the URI forms."""

from __future__ import annotations

import base64
import logging
import multiprocessing
import os
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from nacl.signing import SigningKey

from execution_proof.receipts.encoding import b64url_encode
from execution_proof.runtime import pkcs11_signer, plugin_signer
from execution_proof.runtime.pkcs11_signer import Pkcs11Signer, close_all, generate_in_token, parse_pkcs11_uri
from execution_proof.runtime.settings import ConfigError, load_settings
from execution_proof.runtime.signers import (
    make_key,
    open_named,
    open_root,
    open_signer,
    parse_root_text,
    root_text,
    without_pin,
)
from execution_proof.transparency import note
from execution_proof.transparency.cosignature import Cosigner
from execution_proof.transparency.signer import SeedSigner, SignerError, redact, verify_ed25519
from tests.softhsm import SO_PIN, Token, softhsm_token

ORIGIN = "log.example/v1/log"
SECRET_PIN = "86420-secret-97531"
"""The PIN of a second token: a string that cannot appear in any output by chance."""


@pytest.fixture
def token(tmp_path: Path) -> Iterator[Token]:
    made = softhsm_token(tmp_path)
    yield made
    close_all()


@pytest.fixture
def secret_token(token: Token) -> Token:
    """A second token in the same SoftHSM2 directory, whose PIN is ``SECRET_PIN``."""
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", "secret", "--pin", SECRET_PIN, "--so-pin", SO_PIN],
        env={**os.environ, **token.env}, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return Token(label="secret", module=token.module, conf=token.conf, pin_file=token.pin_file, pin=SECRET_PIN)


def checkpoint_text(size: int = 3) -> str:
    return note.Checkpoint(ORIGIN, size, bytes(range(32))).text()


# --- keys in a token ------------------------------------------------------------------------------


def test_a_root_and_a_log_key_made_in_the_token_sign_and_verify(token: Token) -> None:
    root = generate_in_token(token.uri("root"))
    signature = root.sign(b"a key certificate")
    assert len(signature) == 64 and verify_ed25519(root.public_key(), b"a key certificate", signature)
    again = open_root(token.uri("root"))  # opened anew, by its URI: the same key
    assert again.public_key() == root.public_key()
    assert verify_ed25519(root.public_key(), b"another", again.sign(b"another"))

    log_key = make_key(token.uri("log"), text_of=lambda made: pytest.fail("a token key has no text"))
    assert log_key.public_key() != root.public_key()
    signer = note.Signer(ORIGIN, open_signer(token.uri("log"), parse_text=parse_root_text))
    assert signer.verifier.public_key == log_key.public_key()
    signed = note.sign_note(checkpoint_text(), signer)
    checkpoint, _ = note.open_checkpoint(signed, signer.verifier)
    assert checkpoint.size == 3
    with pytest.raises(note.NoteError, match="the key is in a token"):
        signer.encode()


def test_the_private_key_never_leaves_the_token(token: Token) -> None:
    import pkcs11
    from pkcs11 import Attribute, ObjectClass

    generate_in_token(token.uri("root"))
    close_all()
    lib = pkcs11.lib(token.module)
    session = lib.get_token(token_label=token.label).open(user_pin=token.pin)
    try:
        private = session.get_key(object_class=ObjectClass.PRIVATE_KEY, label="root")
        with pytest.raises(pkcs11.AttributeSensitive):
            private[Attribute.VALUE]
        assert private[Attribute.EXTRACTABLE] is False
        assert private[Attribute.SENSITIVE] is True
        assert private[Attribute.NEVER_EXTRACTABLE] is True
        assert private[Attribute.ALWAYS_SENSITIVE] is True
        assert private[Attribute.TOKEN] is True
        public = session.get_key(object_class=ObjectClass.PUBLIC_KEY, label="root")
        assert public[Attribute.TOKEN] is True
    finally:
        session.close()
        lib.finalize()


def test_making_a_key_over_an_existing_label_is_refused_and_changes_nothing(token: Token) -> None:
    first = generate_in_token(token.uri("root"))
    with pytest.raises(SignerError, match="already holds an object labelled 'root': nothing was made"):
        generate_in_token(token.uri("root"))
    assert Pkcs11Signer(token.uri("root")).public_key() == first.public_key()  # one pair, still the first


def test_the_pin_is_never_logged_printed_or_raised(
    secret_token: Token, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    uri = secret_token.uri("root", pin_value=True)
    assert SECRET_PIN in uri
    signer = generate_in_token(uri)
    assert verify_ed25519(signer.public_key(), b"m", signer.sign(b"m"))
    failures = []
    for bad in (
        secret_token.uri("absent", pin_value=True),
        uri.replace(SECRET_PIN, SECRET_PIN + "0"),
        uri.replace("token=secret", "token=nowhere"),
    ):
        with pytest.raises(SignerError) as raised:
            Pkcs11Signer(bad).sign(b"m")
        failures.append(raised.value)
    shown = [repr(signer), str(signer.uri), *map(str, failures), *map(repr, failures)]
    shown += [str(f.__cause__) + str(f.__context__) for f in failures]
    printed = capsys.readouterr()
    for text in [*shown, caplog.text, printed.out, printed.err]:
        assert SECRET_PIN not in text
    assert all("pin-value=REDACTED" in str(f) for f in failures)


def test_a_wrong_pin_a_missing_object_or_module_name_the_uri_without_the_pin(secret_token: Token) -> None:
    uri = secret_token.uri("root", pin_value=True)
    generate_in_token(uri)
    wrong = uri.replace(SECRET_PIN, "111111")
    with pytest.raises(SignerError) as refused:
        Pkcs11Signer(wrong).public_key()
    assert str(refused.value).startswith(redact(wrong) + ": logging in to the token 'secret' failed (PinIncorrect")
    assert "111111" not in str(refused.value)
    assert pkcs11_signer._here().libs == {}  # a refused login leaves nothing initialised
    missing = secret_token.uri("absent", pin_value=True)
    with pytest.raises(SignerError, match="the token holds no Ed25519 private key labelled 'absent'") as absent:
        Pkcs11Signer(missing).sign(b"m")
    assert str(absent.value).startswith(redact(missing)) and SECRET_PIN not in str(absent.value)
    no_module = uri.replace(secret_token.module, "/nonexistent/libnothing.so")
    with pytest.raises(SignerError, match=r"the PKCS#11 module /nonexistent/libnothing\.so does not exist") as gone:
        Pkcs11Signer(no_module).public_key()
    assert str(gone.value).startswith(redact(no_module)) and SECRET_PIN not in str(gone.value)


def test_without_python_pkcs11_the_error_names_the_extra(token: Token, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pkcs11", None)  # `import pkcs11` raises ImportError
    with pytest.raises(SignerError, match=r"install the extra execution-proof\[pkcs11\]"):
        open_root(token.uri("root"))


def _sign_in_child(signer: Pkcs11Signer, message: bytes, answer: Any) -> None:
    """Sign in a forked child; send what the child inherited of its parent's sessions (none:
    the module to initialise again), the signature, and the sessions the child then held."""
    inherited = (sorted(pkcs11_signer._here().inherited), len(pkcs11_signer._here().opened))
    try:
        signature: bytes | str = signer.sign(message)
    except SignerError as exc:
        signature = str(exc)
    answer.send((inherited, signature, len(pkcs11_signer._here().opened), sorted(pkcs11_signer._here().inherited)))


def test_a_forked_child_signs_with_the_parents_signer(token: Token) -> None:
    """The parent signed (its session open) before the fork; the child drops what it inherited
    and opens its own; the parent's session still signs after."""
    signer = generate_in_token(token.uri("root"))
    public = signer.public_key()
    assert verify_ed25519(public, b"parent", signer.sign(b"parent"))
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_sign_in_child, args=(signer, b"child", send))
    child.start()
    inherited, signature, opened, left = receive.recv()
    child.join(30)
    assert child.exitcode == 0
    assert inherited == ([token.module], 0)  # the parent's session is not the child's
    assert isinstance(signature, bytes), signature
    assert (opened, left) == (1, [])  # its own session, after initialising the module again
    assert verify_ed25519(public, b"child", signature)
    assert verify_ed25519(public, b"parent again", signer.sign(b"parent again"))


def test_threads_sign_at_once_and_a_closed_signer_reopens(token: Token) -> None:
    signer = generate_in_token(token.uri("root"))
    public = signer.public_key()
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def sign_many(n: int) -> None:
        barrier.wait()
        for i in range(20):
            message = f"{n}:{i}".encode()
            results.append(verify_ed25519(public, message, signer.sign(message)))

    threads = [threading.Thread(target=sign_many, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [True] * 80
    assert len([k for k in pkcs11_signer._here().opened if k[0] == signer._serial]) == 4  # a session per thread
    signer.close()
    assert pkcs11_signer._here().opened == {} and pkcs11_signer._here().libs == {}
    assert verify_ed25519(public, b"after close", signer.sign(b"after close"))
    close_all()
    assert verify_ed25519(public, b"after close_all", signer.sign(b"after close_all"))


def test_loading_settings_reads_the_log_key_without_keeping_a_session(token: Token) -> None:
    """Settings are loaded in Sanic's manager and before forks: the public key is read through
    a session closed at once, and nothing of the module stays initialised."""
    made = generate_in_token(token.uri("log"))
    settings = load_settings({"LOG_SIGNING_KEY": token.uri("log"), "LOG_ORIGIN": ORIGIN})
    assert pkcs11_signer._here().logins == {} and pkcs11_signer._here().libs == {}
    assert settings.log_signer is not None and settings.log_signer.name == ORIGIN
    assert settings.log_signer.verifier.public_key == made.public_key()
    signed = note.sign_note(checkpoint_text(), settings.log_signer)
    note.open_checkpoint(signed, settings.log_signer.verifier)
    with pytest.raises(ConfigError, match=r"LOG_SIGNING_KEY: pkcs11:.*no Ed25519 private key labelled 'absent'"):
        load_settings({"LOG_SIGNING_KEY": token.uri("absent"), "LOG_ORIGIN": ORIGIN})


# --- pkcs11: URIs ---------------------------------------------------------------------------------


def test_pkcs11_uris_are_parsed_as_rfc_7512_writes_them(tmp_path: Path) -> None:
    parsed = parse_pkcs11_uri(
        "pkcs11:token=My%20Token;serial=a7d7;slot-id=7;object=log%2Fkey;id=%01%ff;type=private;x-vendor=1"
        "?module-path=/opt/lib%20x.so&pin-value=12%2634",
    )
    assert parsed.token == {"token": "My Token", "serial": "a7d7"}
    assert (parsed.slot_id, parsed.label, parsed.id) == (7, "log/key", b"\x01\xff")
    assert (parsed.module_path, parsed.pin_value) == ("/opt/lib x.so", "12&34")
    assert "12&34" not in repr(parsed) and "12%2634" not in parsed.shown
    defaulted = parse_pkcs11_uri("pkcs11:object=k", {"PKCS11_MODULE": "/m.so"})
    assert defaulted.module_path == "/m.so" and defaulted.pin_source is None
    for uri, why in (
        ("pkcs11:object=k", "no module-path= and PKCS11_MODULE is not set"),
        ("pkcs11:token=t?module-path=/m.so", "name the key with object= (its label) or id="),
        ("pkcs11:object=k;colour=red?module-path=/m.so", "unknown attribute 'colour'"),
        ("pkcs11:object=k;object=j?module-path=/m.so", "object= is given twice"),
        ("pkcs11:object=k;type=public?module-path=/m.so", "type= names the private key"),
        ("pkcs11:object=k;slot-id=x?module-path=/m.so", "slot-id= is a decimal number"),
        ("pkcs11:object=k?module-path=/m.so&pin-value=1&pin-source=file:/p", "pin-source= or pin-value=, not both"),
        ("pkcs11:object=%ff?module-path=/m.so", "object= is not UTF-8"),
    ):
        with pytest.raises(SignerError, match=re.escape(why)):
            parse_pkcs11_uri(uri, {})


def test_a_pin_file_is_read_only_when_its_owner_alone_may_read_it(token: Token) -> None:
    open_pin = token.pin_file.with_name("open-pin")
    open_pin.write_text(token.pin + "\n")
    open_pin.chmod(0o644)
    with pytest.raises(SignerError, match=f"the PIN file {open_pin} is readable by its group or others"):
        Pkcs11Signer(token.uri("root").replace(str(token.pin_file), str(open_pin)))
    with pytest.raises(SignerError, match="pin-source= is file:/ABSOLUTE/PATH"):
        Pkcs11Signer(token.uri("root").replace(f"file:{token.pin_file}", "file:pin"))


def test_the_uri_to_configure_has_no_pin_value_and_keeps_the_pin_source(token: Token) -> None:
    with_value = token.uri("root", pin_value=True)
    assert without_pin(with_value) == with_value.removesuffix(f"&pin-value={token.pin}")
    assert without_pin(token.uri("root")) == token.uri("root")
    assert without_pin("pkcs11:object=k?pin-value=1") == "pkcs11:object=k"
    assert without_pin("pkcs11:object=k?pin-value=1&module-path=/m.so") == "pkcs11:object=k?module-path=/m.so"
    assert without_pin("file:/k") == "file:/k"


# --- file: and env: keys, and values that are keys ----------------------------------------------


def test_a_root_in_a_file_is_made_0600_once_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "root.key"
    made = make_key(f"file:{path}", text_of=root_text)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert open_root(f"file:{path}").public_key() == made.public_key()
    assert parse_root_text(path.read_text()).public_key() == made.public_key()
    before = path.read_bytes()
    with pytest.raises(SignerError, match="the file exists: refusing to overwrite it"):
        make_key(f"file:{path}", text_of=root_text)
    assert path.read_bytes() == before
    with pytest.raises(SignerError, match="an env: key cannot be created"):
        make_key("env:ROOT", text_of=root_text)
    seed = SeedSigner.generate()
    assert open_root("env:ROOT", {"ROOT": root_text(seed)}) == seed
    with pytest.raises(SignerError, match=r"base64url .* of its 32-byte Ed25519 seed"):
        open_root("env:ROOT", {"ROOT": b64url_encode(bytes(31))})


def test_a_value_that_is_no_signer_uri_is_refused_without_being_shown() -> None:
    secret = root_text(SeedSigner.generate())
    with pytest.raises(SignerError) as refused:
        open_root(secret)
    assert secret not in str(refused.value) and "not a signer URI" in str(refused.value)
    with pytest.raises(SignerError, match=r"^s3:/x: not a signer URI \(file:, env:, pkcs11: or plugin:\)"):
        open_root("s3:/x")


def test_log_and_witness_keys_from_a_line_a_file_or_a_token(tmp_path: Path, token: Token) -> None:
    log = note.Signer.generate(ORIGIN)
    assert open_named(log.encode(), None, parse_key=note.Signer.parse, wrap=note.Signer) == log
    key_file = tmp_path / "log.key"
    key_file.write_text(log.encode() + "\n" + log.verifier.encode() + "\n")  # as `log-key new > file` writes it
    key_file.chmod(0o600)
    from_file = open_named(f"file:{key_file}", None, parse_key=note.Signer.parse, wrap=note.Signer)
    assert from_file.verifier == log.verifier
    key_file.chmod(0o640)
    with pytest.raises(SignerError, match="readable by its group or others"):
        open_named(f"file:{key_file}", None, parse_key=note.Signer.parse, wrap=note.Signer)
    in_token = generate_in_token(token.uri("witness"))
    witness = open_named(token.uri("witness"), "w.example", parse_key=Cosigner.parse, wrap=Cosigner)
    assert witness.name == "w.example" and witness.key.public_key == in_token.public_key()
    cosigned = base64.b64decode(witness.cosign(checkpoint_text(), 1700000000).split()[-1])
    assert witness.key.verify(checkpoint_text(), cosigned[4:]) == 1700000000
    with pytest.raises(SignerError, match="has no name of its own"):
        open_named(token.uri("witness"), None, parse_key=Cosigner.parse, wrap=Cosigner)
    with pytest.raises(SignerError, match=r"neither a PRIVATE\+KEY\+… key nor a signer URI"):
        open_named("private+key+lower", None, parse_key=Cosigner.parse, wrap=Cosigner)


# --- plugin: keys, through real executables --------------------------------------------------------

PLUGIN = """#!{python}
import base64, json, sys
from nacl.signing import SigningKey

def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

request = json.load(sys.stdin)
with open({log!r}, "a") as log:
    log.write(json.dumps(request) + "\\n")
key = SigningKey(bytes.fromhex({seed!r}))
mode = request["arg"]
if mode == "error":
    print(json.dumps({{"error": "the KMS said no:\\nAccessDeniedException"}}))
    sys.exit(3)
if mode == "silent-failure":
    sys.exit(1)
if mode == "hang":
    import time
    time.sleep(60)
if request["op"] == "public_key":
    print(json.dumps({{"public_key_base64url": b64(bytes(key.verify_key))}}))
else:
    message = base64.urlsafe_b64decode(request["message_base64url"] + "=" * (-len(request["message_base64url"]) % 4))
    signature = key.sign(message).signature
    if mode == "wrong-signature":
        signature = key.sign(message + b"!").signature
    if mode == "short-signature":
        signature = signature[:63]
    print(json.dumps({{"signature_base64url": b64(signature)}}))
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``execution-proof-signer-test`` on PATH: a seed of its own, every request logged."""
    seed = os.urandom(32)
    log = tmp_path / "requests.jsonl"
    script = tmp_path / "bin" / "execution-proof-signer-test"
    script.parent.mkdir()
    script.write_text(PLUGIN.format(python=sys.executable, log=str(log), seed=seed.hex()))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    public = bytes(SigningKey(seed).verify_key)
    return {"public": public, "requests": lambda: [orjson.loads(line) for line in log.read_text().splitlines()]}


@pytest.mark.slow
def test_a_plugin_signs_and_its_public_key_is_asked_once(plugin: dict[str, Any]) -> None:
    signer = open_root("plugin:test?key/one")
    assert signer.public_key() == plugin["public"]
    first, second = signer.sign(b"one"), signer.sign(b"two")
    assert verify_ed25519(plugin["public"], b"one", first) and verify_ed25519(plugin["public"], b"two", second)
    assert plugin["requests"]() == [
        {"version": 1, "op": "public_key", "arg": "key/one"},
        {"version": 1, "op": "sign", "arg": "key/one", "message_base64url": b64url_encode(b"one")},
        {"version": 1, "op": "sign", "arg": "key/one", "message_base64url": b64url_encode(b"two")},
    ]
    assert open_root("plugin:test").public_key() == plugin["public"]
    assert plugin["requests"]()[-1] == {"version": 1, "op": "public_key", "arg": None}
    made = make_key("plugin:test", text_of=lambda made: pytest.fail("a plugin's key has no text"))
    assert made.public_key() == plugin["public"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arg", "why"),
    [
        ("wrong-signature", "answered a signature that does not verify with its public key: refused"),
        ("short-signature", "answered a signature_base64url of 63 bytes, not 64"),
        ("error", "the plugin execution-proof-signer-test failed: the KMS said no: AccessDeniedException"),
        ("silent-failure", "exited with status 1 without an error document"),
    ],
)
def test_a_plugin_that_answers_wrongly_is_refused(plugin: dict[str, Any], arg: str, why: str) -> None:
    signer = open_root(f"plugin:test?{arg}")
    with pytest.raises(SignerError, match=why) as refused:
        signer.sign(b"message")
    assert str(refused.value).startswith(f"plugin:test?{arg}: ")


@pytest.mark.slow
def test_a_plugin_that_does_not_answer_in_time_or_is_missing_is_refused(
    plugin: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_signer, "TIMEOUT_S", 1.0)
    with pytest.raises(SignerError, match="the plugin execution-proof-signer-test did not answer within 1 s"):
        open_root("plugin:test?hang").public_key()
    with pytest.raises(SignerError, match="no executable execution-proof-signer-absent on PATH"):
        open_root("plugin:absent").public_key()
    with pytest.raises(SignerError, match="a plugin signer is plugin:NAME"):
        open_root("plugin:../evil")
