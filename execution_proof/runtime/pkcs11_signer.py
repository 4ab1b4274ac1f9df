"""Ed25519 keys in a PKCS#11 token, named by ``pkcs11:`` URIs (RFC 7512), through python-pkcs11.

A URI names the module (``module-path``, default ``PKCS11_MODULE``), the token (``token``,
``serial``, ``slot-id``, ``manufacturer``, ``model``), the key (``object``: its label, and/or
``id``) and the PIN (``pin-source=file:/PATH``, the file readable by its owner only, or
``pin-value``). The private key (CKK_EC_EDWARDS) signs with CKM_EDDSA inside the token; the
public key is read from the public key object of the same label and id (``CKA_EC_POINT``, as a
DER OCTET STRING or the 32 bytes themselves).

python-pkcs11 (the extra ``execution-proof[pkcs11]``) is imported only when such a URI is
opened. A PIN is never logged, printed or put in an exception: every message names the URI
with its ``pin-value`` redacted.

Sessions belong to the process and the thread that use them. Nothing is opened when a signer
is made; ``public_key()`` reads the key through a session it closes before returning (and the
module is finalised again when nothing else of this process uses it), so a process that only
loaded its settings holds no PKCS#11 state when it forks. ``sign`` opens a session for its
thread and keeps it. After a fork the child drops what it inherited and initialises the module
anew before its first call. All calls of a process go through one lock: the module is
initialised without locking callbacks, which promise it one caller at a time.

A token's login belongs to the whole process (PKCS#11 logs in an application, not a session):
one session per token holds it while any of this process's sessions needs it, and the
signing sessions open without the PIN.
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from execution_proof.transparency.signer import SignerError, redact, verify_ed25519

EXTRA = "execution-proof[pkcs11]"
ED25519_PARAMS = (bytes.fromhex("06032b6570"), b"\x13\x0cedwards25519")
"""CKA_EC_PARAMS of Ed25519: the OID id-Ed25519 (1.3.101.112), else the curve's name as
PKCS#11 3.0 first wrote it, for a token that knows only that."""
PATH_ATTRIBUTES = frozenset({"token", "serial", "slot-id", "manufacturer", "model", "object", "id", "type"})
QUERY_ATTRIBUTES = frozenset({"module-path", "pin-source", "pin-value"})
TOKEN_FIELDS = (("token", "label"), ("serial", "serial"), ("manufacturer", "manufacturer_id"), ("model", "model"))
"""A token's path attribute, and the python-pkcs11 ``Token`` attribute it is matched against."""
_signers = itertools.count()


@dataclass(frozen=True)
class Pkcs11Uri:
    """What a ``pkcs11:`` URI says, percent-decoded; ``shown`` is the URI fit for a message."""

    shown: str
    module_path: str
    token: dict[str, str]
    slot_id: int | None
    label: str | None
    id: bytes | None
    pin_source: str | None
    pin_value: str | None = field(repr=False)

    def describe_key(self) -> str:
        named = [f"labelled {self.label!r}"] if self.label is not None else []
        named += [f"of id {self.id.hex()}"] if self.id is not None else []
        return " and ".join(named)


def parse_pkcs11_uri(uri: str, environ: Mapping[str, str] | None = None) -> Pkcs11Uri:
    """The URI's attributes; ``SignerError`` (naming the URI, PIN redacted) for an attribute this
    signer does not know (``x-`` ones aside), one given twice, a key named by neither
    ``object`` nor ``id``, or no module."""
    environ = os.environ if environ is None else environ
    shown = redact(uri)
    if not uri.startswith("pkcs11:"):
        raise SignerError(f"{shown}: not a pkcs11: URI")
    path, _, query = uri.removeprefix("pkcs11:").partition("?")
    attributes = _attributes(path, ";", PATH_ATTRIBUTES, shown)
    options = _attributes(query, "&", QUERY_ATTRIBUTES, shown)
    if attributes.get("type", "private") != "private":
        raise SignerError(f"{shown}: type= names the private key (type=private) or is left out")
    module = options.get("module-path") or environ.get("PKCS11_MODULE", "")
    if not module:
        raise SignerError(f"{shown}: no module-path= and PKCS11_MODULE is not set: name the token's PKCS#11 module")
    if "pin-source" in options and "pin-value" in options:
        raise SignerError(f"{shown}: give pin-source= or pin-value=, not both")
    slot_id = attributes.get("slot-id")
    if slot_id is not None and not slot_id.isdigit():
        raise SignerError(f"{shown}: slot-id= is a decimal number")
    raw_id = attributes.get("id")
    if "object" not in attributes and raw_id is None:
        raise SignerError(f"{shown}: name the key with object= (its label) or id=")
    return Pkcs11Uri(
        shown=shown,
        module_path=module,
        token={name: attributes[name] for name, _ in TOKEN_FIELDS if name in attributes},
        slot_id=None if slot_id is None else int(slot_id),
        label=attributes.get("object"),
        id=None if raw_id is None else unquote_to_bytes(raw_id),
        pin_source=options.get("pin-source"),
        pin_value=options.get("pin-value"),
    )


def _attributes(text: str, separator: str, known: frozenset[str], shown: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in filter(None, text.split(separator)):
        name, sep, value = part.partition("=")
        if name.startswith("x-"):
            continue
        if not sep or name not in known:
            raise SignerError(f"{shown}: unknown attribute {name!r} (known: {', '.join(sorted(known))})")
        if name in found:
            raise SignerError(f"{shown}: {name}= is given twice")
        if name == "id":
            found[name] = value  # bytes, not text: decoded by the caller
            continue
        try:
            found[name] = unquote(value, errors="strict")
        except UnicodeDecodeError:
            raise SignerError(f"{shown}: {name}= is not UTF-8 once percent-decoded") from None
    return found


def read_pin(uri: Pkcs11Uri) -> str | None:
    """The PIN the URI gives (``pin-value``, or the first line of the ``pin-source`` file), or
    None. ``SignerError`` for a PIN file that cannot be read or that its group or others may
    read; the message names the file, never what it holds."""
    if uri.pin_value is not None:
        return uri.pin_value
    if uri.pin_source is None:
        return None
    source = uri.pin_source.removeprefix("file://").removeprefix("file:")
    path = Path(source)
    if not path.is_absolute():
        raise SignerError(f"{uri.shown}: pin-source= is file:/ABSOLUTE/PATH")
    try:
        if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SignerError(f"{uri.shown}: the PIN file {path} is readable by its group or others (chmod 600 it)")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SignerError(f"{uri.shown}: cannot read the PIN file {path} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SignerError(f"{uri.shown}: the PIN file {path} is not text") from None
    lines = text.splitlines()
    return lines[0] if lines else ""


def import_pkcs11(shown: str) -> ModuleType:
    """python-pkcs11, or ``SignerError`` naming the extra that installs it."""
    try:
        import pkcs11
    except ImportError:
        raise SignerError(
            f"{shown}: a pkcs11: signer needs python-pkcs11: install the extra {EXTRA} "
            "(from a clone: pip install '.[pkcs11]')"
        ) from None
    return pkcs11


# --------------------------------------------------------------------------- this process's state


@dataclass
class _Login:
    session: Any
    pin: str | None = field(repr=False)
    users: int = 0


@dataclass
class _Open:
    session: Any
    key: Any
    login: tuple[str, int]


class _Process:
    """What this process holds open: modules initialised, logins, and each signer's session
    per thread. Replaced, not closed, in a forked child: the handles are the parent's."""

    def __init__(self, inherited: frozenset[str] = frozenset()) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.libs: dict[str, Any] = {}
        self.inherited = set(inherited)
        """Modules the parent initialised: finalised and initialised again before first use."""
        self.logins: dict[tuple[str, int], _Login] = {}
        self.opened: dict[tuple[int, int], _Open] = {}


_process = _Process()


def _forget_parent() -> None:
    global _process
    _process = _Process(frozenset(_process.libs) | frozenset(_process.inherited))


os.register_at_fork(after_in_child=_forget_parent)


def _here() -> _Process:
    """This process's state (a fork that skipped the at-fork hook is seen by the pid)."""
    if _process.pid != os.getpid():
        _forget_parent()
    return _process


@contextmanager
def _token_errors(p11: ModuleType, shown: str, doing: str) -> Iterator[None]:
    """A python-pkcs11 error as a ``SignerError`` naming the URI and what failed (its class
    names the PKCS#11 return value; it never holds the PIN)."""
    try:
        yield
    except p11.PKCS11Error as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise SignerError(f"{shown}: {doing} failed ({detail})") from None


def _lib(state: _Process, p11: ModuleType, uri: Pkcs11Uri) -> Any:
    module = uri.module_path
    if module in state.libs:
        return state.libs[module]
    if "/" in module and not Path(module).is_file():
        raise SignerError(f"{uri.shown}: the PKCS#11 module {module} does not exist")
    with _token_errors(p11, uri.shown, f"loading the PKCS#11 module {module}"):
        lib = p11.lib(module)
        if module in state.inherited:
            state.inherited.discard(module)
            with suppress(p11.PKCS11Error):
                lib.finalize()  # the parent's state, copied by the fork
            lib.initialize()
    state.libs[module] = lib
    return lib


def _token(lib: Any, p11: ModuleType, uri: Pkcs11Uri) -> Any:
    with _token_errors(p11, uri.shown, "listing the tokens"):
        tokens = [
            slot.get_token()
            for slot in lib.get_slots(token_present=True)
            if uri.slot_id is None or slot.slot_id == uri.slot_id
        ]

    def matches(token: Any) -> bool:
        for name, attribute in TOKEN_FIELDS:
            value = getattr(token, attribute)
            value = value.decode("ascii", "replace") if isinstance(value, bytes) else value
            if name in uri.token and value.rstrip() != uri.token[name]:
                return False
        return True

    found = [token for token in tokens if matches(token)]
    if not found:
        raise SignerError(f"{uri.shown}: no token of the module {uri.module_path} matches")
    if len(found) > 1:
        raise SignerError(f"{uri.shown}: {len(found)} tokens match: name one by token=, serial= or slot-id=")
    return found[0]


def _login(state: _Process, p11: ModuleType, uri: Pkcs11Uri, pin: str | None) -> tuple[tuple[str, int], Any]:
    """The token, logged in for this process (one more user of its login); (login key, token).
    A failure leaves the module finalised again if nothing else of this process uses it."""
    try:
        token = _token(_lib(state, p11, uri), p11, uri)
        key = (uri.module_path, token.slot.slot_id)
        login = state.logins.get(key)
        if login is None:
            with _token_errors(p11, uri.shown, f"logging in to the token {token.label!r}"):
                session = token.open(user_pin=pin) if pin is not None else token.open()
            login = state.logins[key] = _Login(session, pin)
    except SignerError:
        _finalize_unused(state, p11, uri.module_path)
        raise
    if login.pin != pin:
        raise SignerError(f"{uri.shown}: this process is logged in to the token {token.label!r} with another PIN")
    login.users += 1
    return key, token


def _release(state: _Process, p11: ModuleType, key: tuple[str, int]) -> None:
    """One user less of a login: the last one logs out, and the module is finalised when this
    process uses nothing else of it."""
    login = state.logins[key]
    login.users -= 1
    if login.users > 0:
        return
    del state.logins[key]
    with suppress(p11.PKCS11Error):
        login.session.close()  # fails only with the token gone: nothing left to close
    _finalize_unused(state, p11, key[0])


def _finalize_unused(state: _Process, p11: ModuleType, module: str) -> None:
    if module in state.libs and not any(other[0] == module for other in state.logins):
        lib = state.libs.pop(module)
        with suppress(p11.PKCS11Error):
            lib.finalize()


def _find(session: Any, p11: ModuleType, uri: Pkcs11Uri, object_class: Any) -> Any:
    template: dict[Any, Any] = {p11.Attribute.CLASS: object_class, p11.Attribute.KEY_TYPE: p11.KeyType.EC_EDWARDS}
    if uri.label is not None:
        template[p11.Attribute.LABEL] = uri.label
    if uri.id is not None:
        template[p11.Attribute.ID] = uri.id
    with _token_errors(p11, uri.shown, "looking for the key"):
        found = list(session.get_objects(template))
    what = "private" if object_class == p11.ObjectClass.PRIVATE_KEY else "public"
    if not found:
        raise SignerError(f"{uri.shown}: the token holds no Ed25519 {what} key {uri.describe_key()}")
    if len(found) > 1:
        raise SignerError(f"{uri.shown}: {len(found)} Ed25519 {what} keys {uri.describe_key()}: name one by id=")
    return found[0]


def _public_key_bytes(public: Any, p11: ModuleType, uri: Pkcs11Uri) -> bytes:
    with _token_errors(p11, uri.shown, "reading the public key"):
        point = bytes(public[p11.Attribute.EC_POINT])
    if len(point) == 34 and point[:2] == b"\x04\x20":
        point = point[2:]  # DER OCTET STRING, as PKCS#11 3.0 writes it
    if len(point) != 32:
        raise SignerError(f"{uri.shown}: the public key is not an Ed25519 key ({len(point)} bytes)")
    return point


class Pkcs11Signer:
    """An Ed25519 key in a PKCS#11 token (see the module's doc). Made without touching the
    token: a URI that cannot work (no module, no PIN file, python-pkcs11 missing) is refused
    here; a token or key that is missing, at the first ``public_key()`` or ``sign``. Every
    failure is a ``SignerError`` naming the URI, PIN redacted."""

    def __init__(self, uri: str, environ: Mapping[str, str] | None = None) -> None:
        self._uri = parse_pkcs11_uri(uri, environ)
        self._p11 = import_pkcs11(self._uri.shown)
        self._pin = read_pin(self._uri)
        self._serial = next(_signers)
        self._public: bytes | None = None

    @property
    def uri(self) -> Pkcs11Uri:
        return self._uri

    def __repr__(self) -> str:
        return f"Pkcs11Signer({self._uri.shown})"

    def public_key(self) -> bytes:
        """The raw public key, read once (and the private key beside it found) in a session
        closed at once."""
        if self._public is not None:
            return self._public
        state = _here()
        with state.lock:
            if self._public is None:
                key, _token_found = _login(state, self._p11, self._uri, self._pin)
                try:
                    session = state.logins[key].session
                    _find(session, self._p11, self._uri, self._p11.ObjectClass.PRIVATE_KEY)
                    public = _find(session, self._p11, self._uri, self._p11.ObjectClass.PUBLIC_KEY)
                    self._public = _public_key_bytes(public, self._p11, self._uri)
                finally:
                    _release(state, self._p11, key)
            return self._public

    def sign(self, message: bytes) -> bytes:
        """The token's Ed25519 signature of ``message``, checked against the public key before
        it is returned. A failed call drops this thread's session and tries once more with a
        new one (a token that restarted); then ``SignerError``."""
        public = self.public_key()
        state = _here()
        with state.lock:
            try:
                signature = self._sign_once(state, message)
            except SignerError:
                self._close_thread(state, threading.get_ident())
                signature = self._sign_once(state, message)
        if not verify_ed25519(public, message, signature):
            raise SignerError(f"{self._uri.shown}: the token's signature does not verify with its public key")
        return signature

    def _sign_once(self, state: _Process, message: bytes) -> bytes:
        opened = state.opened.get((self._serial, threading.get_ident()))
        if opened is None:
            opened = self._open(state)
        with _token_errors(self._p11, self._uri.shown, "signing"):
            return bytes(opened.key.sign(message, mechanism=self._p11.Mechanism.EDDSA))

    def _open(self, state: _Process) -> _Open:
        key, token = _login(state, self._p11, self._uri, self._pin)
        try:
            with _token_errors(self._p11, self._uri.shown, "opening a session"):
                session = token.open()
            try:
                private = _find(session, self._p11, self._uri, self._p11.ObjectClass.PRIVATE_KEY)
            except SignerError:
                session.close()
                raise
        except BaseException:
            _release(state, self._p11, key)
            raise
        opened = state.opened[(self._serial, threading.get_ident())] = _Open(session, private, key)
        return opened

    def _close_thread(self, state: _Process, thread: int) -> None:
        opened = state.opened.pop((self._serial, thread), None)
        if opened is None:
            return
        with suppress(self._p11.PKCS11Error):
            opened.session.close()
        _release(state, self._p11, opened.login)

    def close(self) -> None:
        """Close this signer's sessions in this process (every thread's); it opens new ones if
        it signs again."""
        state = _here()
        with state.lock:
            for serial, thread in list(state.opened):
                if serial == self._serial:
                    self._close_thread(state, thread)


def close_all() -> None:
    """Close every session this process holds in any token, log out and finalise the modules
    (a process done with its tokens; a test moving to another token configuration). Signers
    open new sessions if they sign again."""
    global _process
    state = _here()
    with state.lock:
        p11 = import_pkcs11("pkcs11:") if state.libs else None
        for opened in state.opened.values():
            _quietly(p11, opened.session.close)
        for login in state.logins.values():
            _quietly(p11, login.session.close)
        for lib in state.libs.values():
            _quietly(p11, lib.finalize)
        _process = _Process(frozenset(state.inherited))


def _quietly(p11: ModuleType | None, close: Any) -> None:
    try:
        close()
    except Exception as exc:  # a token gone away: nothing left to close
        if p11 is None or not isinstance(exc, p11.PKCS11Error):
            raise


def generate_in_token(uri: str, environ: Mapping[str, str] | None = None) -> Pkcs11Signer:
    """Make an Ed25519 key pair in the token, labelled ``object`` (and of ``id`` when the URI
    gives one), that never leaves it: ``CKA_TOKEN`` true, the private key ``CKA_SENSITIVE``
    true and ``CKA_EXTRACTABLE`` false (checked after, and the pair destroyed if the token did
    otherwise). ``SignerError`` when an object of that label (or id) exists: nothing is made."""
    signer = Pkcs11Signer(uri, environ)
    spec, p11 = signer.uri, signer._p11
    if spec.label is None:
        raise SignerError(f"{spec.shown}: name the new key with object= (its label)")
    state = _here()
    with state.lock:
        key, token = _login(state, p11, spec, signer._pin)
        try:
            with _token_errors(p11, spec.shown, "opening a read-write session"):
                session = token.open(rw=True)
            try:
                signer._public = _generate(session, p11, spec)
            finally:
                with _token_errors(p11, spec.shown, "closing the session"):
                    session.close()
        finally:
            _release(state, p11, key)
    return signer


def _generate(session: Any, p11: ModuleType, spec: Pkcs11Uri) -> bytes:
    attribute = p11.Attribute
    existing: list[Any] = []
    with _token_errors(p11, spec.shown, "looking for existing objects"):
        existing += session.get_objects({attribute.LABEL: spec.label})
        if spec.id is not None:
            existing += session.get_objects({attribute.ID: spec.id})
    if existing:
        raise SignerError(
            f"{spec.shown}: the token already holds an object {spec.describe_key()}: nothing was made "
            "(choose another object=)"
        )
    private_template = {
        attribute.TOKEN: True,
        attribute.PRIVATE: True,
        attribute.SENSITIVE: True,
        attribute.EXTRACTABLE: False,
        attribute.SIGN: True,
    }
    refused: Exception | None = None
    for params in ED25519_PARAMS:
        public_template = {attribute.TOKEN: True, attribute.VERIFY: True, attribute.EC_PARAMS: params}
        try:
            public, private = session.generate_keypair(
                p11.KeyType.EC_EDWARDS,
                store=True,
                label=spec.label,
                id=spec.id,
                public_template=public_template,
                private_template=private_template,
            )
            break
        except (p11.DomainParamsInvalid, p11.AttributeValueInvalid, p11.TemplateInconsistent) as exc:
            refused = exc  # this token names Ed25519 the other way
        except p11.PKCS11Error as exc:
            raise SignerError(f"{spec.shown}: making the key failed ({type(exc).__name__})") from None
    else:
        raise SignerError(f"{spec.shown}: the token does not make Ed25519 keys ({type(refused).__name__})")
    with _token_errors(p11, spec.shown, "checking the new key"):
        kept_inside = private[attribute.SENSITIVE] and not private[attribute.EXTRACTABLE]
        if not kept_inside:
            private.destroy()
            public.destroy()
            raise SignerError(f"{spec.shown}: the token made the key extractable: destroyed, nothing was made")
    return _public_key_bytes(public, p11, spec)
