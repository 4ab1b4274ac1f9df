"""transparency/policy.py against C2SP tlog-policy, rule by rule, with the specification's own
example; and the cosignature clock skew the quorum allows (LOG_COSIGNATURE_SKEW_S)."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from execution_proof.transparency import note
from execution_proof.transparency.cosignature import Cosigner
from execution_proof.transparency.policy import (
    COSIGNATURE_SKEW_S,
    MAX_GROUPS,
    MAX_LOGS,
    MAX_WITNESSES,
    PolicyError,
    check_quorum,
    cosignature_skew,
    parse_policy,
)

ORIGIN = "policy.example/log"
NOW = 1_800_000_000


@pytest.fixture(scope="module")
def keys() -> dict[str, Cosigner]:
    return {name: Cosigner.generate(f"witness.example/{name}") for name in ("X1", "X2", "X3", "Y1", "Y2", "Y3")}


@pytest.fixture(scope="module")
def log() -> note.Signer:
    return note.Signer.generate(ORIGIN)


def witness_lines(keys: dict[str, Cosigner], *names: str) -> str:
    return "".join(f"witness {name} {keys[name].key.encode()}\n" for name in names)


def spec_example(log: note.Signer, keys: dict[str, Cosigner]) -> str:
    """The example of tlog-policy's "Example policy", with real keys."""
    return (
        f"log {log.verifier.encode()}\n\n"
        + witness_lines(keys, "X1", "X2", "X3")
        + "group X-witnesses 2 X1 X2 X3\n\n"
        + witness_lines(keys, "Y1", "Y2", "Y3")
        + "group Y-witnesses any Y1 Y2 Y3\n\n"
        + "group X-and-Y all X-witnesses Y-witnesses\n"
        + "quorum X-and-Y\n"
    )


def test_the_specifications_example_means_two_xs_and_one_y(log: note.Signer, keys: dict[str, Cosigner]) -> None:
    policy = parse_policy(spec_example(log, keys))
    assert [key.name for key in policy.log_keys()] == [ORIGIN]
    assert list(policy.witnesses) == ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    assert policy.groups == {
        "X-witnesses": (2, ["X1", "X2", "X3"]),
        "Y-witnesses": (1, ["Y1", "Y2", "Y3"]),
        "X-and-Y": (2, ["X-witnesses", "Y-witnesses"]),
    }
    names = ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    for count in range(len(names) + 1):
        for cosigned in itertools.combinations(names, count):
            xs = sum(name.startswith("X") for name in cosigned)
            ys = len(cosigned) - xs
            assert policy.satisfied(set(cosigned)) == (xs >= 2 and ys >= 1), cosigned


def test_only_the_quorum_is_mandatory(keys: dict[str, Cosigner]) -> None:
    policy = parse_policy("quorum none\n")
    assert policy.logs == [] and policy.witnesses == {} and policy.satisfied(set())
    with pytest.raises(PolicyError, match="names no log"):
        policy.log_key()
    # Witnesses listed, none required.
    assert parse_policy(witness_lines(keys, "X1") + "quorum none\n").satisfied(set())
    for text in ("", "# nothing\n", "log x\n"):
        with pytest.raises(PolicyError):
            parse_policy(text)


def test_logs_and_witnesses_in_any_order_groups_and_quorum_only_after_what_they_name(
    log: note.Signer, keys: dict[str, Cosigner]
) -> None:
    text = witness_lines(keys, "X1") + f"log {log.verifier.encode()} https://log.example/\n" + "quorum X1\n"
    policy = parse_policy(text)
    assert policy.logs[0][1] == "https://log.example/" and policy.quorum == "X1"
    with pytest.raises(PolicyError, match="line 1: 'X1' is not a witness or group defined above"):
        parse_policy("group g any X1\n" + witness_lines(keys, "X1") + "quorum g\n")
    with pytest.raises(PolicyError, match="line 1: the quorum names nothing defined above"):
        parse_policy("quorum X1\n" + witness_lines(keys, "X1"))
    with pytest.raises(PolicyError, match="line 3: a second quorum line"):
        parse_policy(witness_lines(keys, "X1") + "quorum X1\nquorum none\n")


def test_group_thresholds_are_all_any_or_k_of_n_in_decimal(keys: dict[str, Cosigner]) -> None:
    base = witness_lines(keys, "X1", "X2", "X3")
    assert parse_policy(base + "group g all X1 X2 X3\nquorum g\n").groups["g"] == (3, ["X1", "X2", "X3"])
    assert parse_policy(base + "group g any X1 X2 X3\nquorum g\n").groups["g"] == (1, ["X1", "X2", "X3"])
    assert parse_policy(base + "group g 3 X1 X2 X3\nquorum g\n").groups["g"] == (3, ["X1", "X2", "X3"])
    for rule in ("0", "4", "01", "+1", "-1", "1.0", "two", "ALL", "\u0661"):
        with pytest.raises(PolicyError, match=r"the threshold is all, any or 1\.\.3"):
            parse_policy(base + f"group g {rule} X1 X2 X3\nquorum g\n")
    with pytest.raises(PolicyError, match="not a log, witness, group or quorum line"):
        parse_policy(base + "group g any\nquorum g\n")  # n >= 1
    with pytest.raises(PolicyError, match="'none' is not a witness or group"):
        parse_policy(base + "group g any X1 none\nquorum g\n")


def test_each_name_is_a_member_of_one_group_at_most(keys: dict[str, Cosigner]) -> None:
    """So a witness contributes to the quorum in one way only: listed in two groups, X1 alone
    would meet "2 of (a, b)"."""
    base = witness_lines(keys, "X1", "X2")
    with pytest.raises(PolicyError, match="line 4: 'X1' is already a member of group 'a'"):
        parse_policy(base + "group a any X1\ngroup b any X1 X2\ngroup top 2 a b\nquorum top\n")
    with pytest.raises(PolicyError, match="line 3: 'X1' is in this group twice"):
        parse_policy(base + "group a 1 X1 X1\nquorum a\n")
    with pytest.raises(PolicyError, match="'a' is already a member of group 'b'"):
        parse_policy(base + "group a any X1\ngroup b any a\ngroup c any a\nquorum c\n")
    # A group may still be the quorum and a witness both a member and nothing else.
    nested = parse_policy(base + "group a any X1\ngroup top all a X2\nquorum top\n")
    assert nested.satisfied({"X1", "X2"}) and not nested.satisfied({"X1"})


def test_duplicate_keys_are_the_same_public_key_whatever_the_name(log: note.Signer, keys: dict[str, Cosigner]) -> None:
    raw = keys["X1"].key.public_key
    renamed = Cosigner("another.example/name", keys["X1"].seed).key.encode()
    assert renamed.split("+")[0] != keys["X1"].key.encode().split("+")[0]
    with pytest.raises(PolicyError, match="line 2: a duplicate witness key"):
        parse_policy(witness_lines(keys, "X1") + f"witness X9 {renamed}\nquorum none\n")
    other_name = note.Signer("other.example/log", log.seed).verifier.encode()
    with pytest.raises(PolicyError, match="line 2: a duplicate log key"):
        parse_policy(f"log {log.verifier.encode()}\nlog {other_name}\nquorum none\n")
    # tlog-policy forbids duplicate logs and duplicate witnesses; a log and a witness on one
    # key pair are two roles with two signature types, which it allows.
    same_pair = note.Signer("pair.example/log", keys["X1"].seed).verifier.encode()
    both = parse_policy(witness_lines(keys, "X1") + f"log {same_pair}\nquorum X1\n")
    assert both.log_key().public_key == raw


def test_names_are_opaque_octets(keys: dict[str, Cosigner]) -> None:
    kelvin = "\u212a"  # KELVIN SIGN, not "K"
    text = f"witness K {keys['X1'].key.encode()}\nwitness {kelvin} {keys['X2'].key.encode()}\ngroup g all K {kelvin}\n"
    policy = parse_policy(text + "quorum g\n")
    assert set(policy.witnesses) == {"K", kelvin} and not policy.satisfied({"K"})
    latin1 = b"witness \xff " + keys["X1"].key.encode().encode() + b"\nwitness \xfe "
    latin1 += keys["X2"].key.encode().encode() + b"\n# caf\xe9\ngroup g any \xff \xfe\nquorum g\n"
    octets = parse_policy(latin1)
    assert len(octets.witnesses) == 2 and octets.groups["g"][0] == 1


def test_whitespace_comments_and_the_character_set(keys: dict[str, Cosigner]) -> None:
    policy = parse_policy(f"  \t# a comment\n\t\nwitness\tX1 \t{keys['X1'].key.encode()}  \n \tquorum  X1\t\n")
    assert policy.quorum == "X1"
    for bad in ("quorum none\r\n", "quorum none\x7f\n", "quorum\x0bnone\n", "\x00\nquorum none\n"):
        with pytest.raises(PolicyError, match="control characters"):
            parse_policy(bad)
    with pytest.raises(PolicyError):
        parse_policy("quorum\u00a0none\n")  # only spaces and tabs separate words


def test_the_limits_are_above_what_the_specification_asks_for() -> None:
    """tlog-policy: support at least 32 logs, 32 witnesses and 32 groups."""
    assert min(MAX_LOGS, MAX_WITNESSES, MAX_GROUPS) >= 32
    logs = [note.Signer.generate(f"log{n}.example/log").verifier.encode() for n in range(MAX_LOGS + 1)]
    witnesses = [Cosigner.generate(f"w{n}.example").key.encode() for n in range(MAX_WITNESSES + 1)]
    text = "".join(f"log {key}\n" for key in logs[:MAX_LOGS])
    text += "".join(f"witness w{n} {key}\n" for n, key in enumerate(witnesses[:MAX_WITNESSES]))
    text += "".join(f"group g{n} any w{n}\n" for n in range(MAX_GROUPS))
    policy = parse_policy(text + "quorum g0\n")
    assert (len(policy.logs), len(policy.witnesses), len(policy.groups)) == (MAX_LOGS, MAX_WITNESSES, MAX_GROUPS)
    with pytest.raises(PolicyError, match=f"more than {MAX_LOGS} logs"):
        parse_policy(text + f"log {logs[-1]}\nquorum g0\n")
    with pytest.raises(PolicyError, match=f"more than {MAX_WITNESSES} witnesses"):
        parse_policy(text + f"witness extra {witnesses[-1]}\nquorum g0\n")
    with pytest.raises(PolicyError, match=f"more than {MAX_GROUPS} groups"):
        parse_policy(text + "group extra any g0\nquorum g0\n")


def test_a_cosignature_a_little_ahead_counts_and_one_far_ahead_does_not(
    log: note.Signer, keys: dict[str, Cosigner]
) -> None:
    text = note.Checkpoint(ORIGIN, 10, hashlib.sha256(b"root").digest()).text()
    policy = parse_policy(f"log {log.verifier.encode()}\n" + witness_lines(keys, "X1") + "quorum X1\n")

    def signed(at: int) -> str:
        return text + "\n" + log.signature_line(text.encode()) + keys["X1"].cosign(text, at)

    assert check_quorum(signed(NOW + 120), policy, NOW).ok  # the 120 s a real witness was once ahead
    assert check_quorum(signed(NOW + COSIGNATURE_SKEW_S), policy, NOW).ok
    late = check_quorum(signed(NOW + COSIGNATURE_SKEW_S + 1), policy, NOW)
    assert not late.ok and "dated in the future, not counted: X1" in late.reason
    assert not check_quorum(signed(NOW + 1), policy, NOW, skew_s=0).ok
    assert check_quorum(signed(NOW + 1000), policy, NOW, skew_s=1000).ok


def test_the_skew_is_read_from_the_environment() -> None:
    assert cosignature_skew({}) == COSIGNATURE_SKEW_S == 300
    assert cosignature_skew({"LOG_COSIGNATURE_SKEW_S": " 0 "}) == 0
    assert cosignature_skew({"LOG_COSIGNATURE_SKEW_S": "86400"}) == 86400
    for bad in ("-1", "86401", "1.5", "five", "\u0661"):
        with pytest.raises(PolicyError, match="LOG_COSIGNATURE_SKEW_S"):
            cosignature_skew({"LOG_COSIGNATURE_SKEW_S": bad})


def test_verify_reads_the_same_skew_and_refuses_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from execution_proof.client import log_checks as verify_log

    monkeypatch.delenv("LOG_COSIGNATURE_SKEW_S", raising=False)
    assert verify_log.env_skew() == 300
    monkeypatch.setenv("LOG_COSIGNATURE_SKEW_S", "7")
    assert verify_log.env_skew() == 7
    monkeypatch.setenv("LOG_COSIGNATURE_SKEW_S", "soon")
    with pytest.raises(verify_log.LogInputError, match="LOG_COSIGNATURE_SKEW_S"):
        verify_log.env_skew()


def test_the_service_reads_the_skew_and_refuses_a_bad_one() -> None:
    from execution_proof.runtime.settings import ConfigError, load_settings

    assert load_settings({}).log_cosignature_skew_s == 300
    assert load_settings({"LOG_COSIGNATURE_SKEW_S": "60"}).log_cosignature_skew_s == 60
    with pytest.raises(ConfigError, match="LOG_COSIGNATURE_SKEW_S must be seconds"):
        load_settings({"LOG_COSIGNATURE_SKEW_S": "-5"})
