"""Who sent a delivery: the verifier vectors of receiver-contract §15.7 and the Azure credential rules of §15.6."""

from __future__ import annotations

import base64
import os

import pytest
from multidict import CIMultiDict

from pi_dispatch.core.errors import ConfigError
from pi_dispatch.receiver.auth import hub_signature, hub_signature_valid
from pi_dispatch.receiver.forges.azure.access import AzureVerifier, secret_equals
from pi_dispatch.receiver.forges.gitlab.access import GitLabVerifier, gitlab_signing_key
from tests.support.receiving import gitlab_signature_headers

BODY = b'{"action":"labeled"}'
KEY = os.urandom(32)
WHSEC = "whsec_" + base64.b64encode(KEY).decode()
NOW = 1_800_000_000.0


def test_hub_signatures() -> None:
    secret = b"test-webhook-secret"
    signature = hub_signature(secret, BODY)
    assert hub_signature_valid(secret, BODY, signature)
    assert hub_signature_valid(secret, BODY, "sha256=" + signature[7:].upper())
    assert not hub_signature_valid(secret, BODY + b" ", signature)
    assert not hub_signature_valid(secret, BODY, "sha256=deadbeef")
    assert not hub_signature_valid(secret, BODY, signature[7:])
    assert not hub_signature_valid(b"forgejo-secret", BODY, signature)
    assert not hub_signature_valid(secret, BODY, "sha256=" + "zz" * 32)


def headers(**values: str) -> CIMultiDict[str]:
    return CIMultiDict(values)


def test_gitlab_signature_mode() -> None:
    verifier = GitLabVerifier.build("signature", WHSEC)
    good = gitlab_signature_headers(BODY, KEY, "wh-1", NOW)
    assert verifier.refusal(CIMultiDict(good), BODY, NOW) is None
    assert verifier.refusal(CIMultiDict(good), BODY + b"x", NOW) == "invalid signature"
    body_only = base64.b64encode(__import__("hmac").new(KEY, BODY, "sha256").digest()).decode()
    assert verifier.refusal(CIMultiDict(good | {"webhook-signature": "v1," + body_only}), BODY, NOW) == (
        "invalid signature"
    )
    stale = gitlab_signature_headers(BODY, KEY, "wh-1", NOW - 600)
    assert verifier.refusal(CIMultiDict(stale), BODY, NOW) == "stale or invalid timestamp"
    assert verifier.refusal(CIMultiDict(good | {"webhook-timestamp": "soon"}), BODY, NOW) == (
        "stale or invalid timestamp"
    )
    mine = good["webhook-signature"]
    theirs = "v1," + base64.b64encode(b"x" * 32).decode()
    for listed, ok in ((f"{theirs} {mine}", True), (f"{mine} {theirs}", True), (f"{theirs} {theirs}", False)):
        verdict = verifier.refusal(CIMultiDict(good | {"webhook-signature": listed}), BODY, NOW)
        assert (verdict is None) is ok
    assert verifier.refusal(CIMultiDict(good | {"webhook-signature": "v9,anything"}), BODY, NOW) == "invalid signature"
    missing = dict(good)
    del missing["webhook-timestamp"]
    assert verifier.refusal(CIMultiDict(missing), BODY, NOW) == "missing signature"
    assert verifier.refusal(headers(**{"X-Gitlab-Token": "anything"}), BODY, NOW) == "missing signature"


def test_gitlab_token_mode() -> None:
    verifier = GitLabVerifier.build("token", "a-shared-secret")
    assert verifier.refusal(headers(**{"X-Gitlab-Token": "a-shared-secret"}), BODY, NOW) is None
    for wrong in ("wrong", "a-shared-secretx", "a-shared-secre"):
        assert verifier.refusal(headers(**{"X-Gitlab-Token": wrong}), BODY, NOW) == "invalid token"
    assert verifier.refusal(headers(**{"X-Gitlab-Token": ""}), BODY, NOW) == "missing token"
    signed = gitlab_signature_headers(BODY, KEY, "wh-1", NOW)
    assert verifier.refusal(CIMultiDict(signed), BODY, NOW) == "missing token"


def test_gitlab_modes_are_refused_at_construction() -> None:
    for mode, secret in (("hmac", "x"), ("", "x"), ("token", ""), ("signature", "whsec_")):
        with pytest.raises(ConfigError):
            GitLabVerifier.build(mode, secret)
    assert gitlab_signing_key(WHSEC) == gitlab_signing_key(WHSEC.removeprefix("whsec_")) == KEY


def test_azure_credentials() -> None:
    basic = AzureVerifier("basic", base64.b64encode(b"hooks:s3cret").decode())
    assert basic.accepts(headers(Authorization="Basic " + basic.secret))
    assert not basic.accepts(headers(Authorization="Basic " + basic.secret + "x"))
    assert not basic.accepts(headers(Authorization="Bearer " + basic.secret))
    assert not basic.accepts(headers(Authorization="basic " + basic.secret))
    assert not basic.accepts(headers(**{"X-Pi-Secret": basic.secret}))
    header = AzureVerifier("header", "s3cret", "X-Pi-Secret")
    assert header.accepts(headers(**{"x-pi-secret": "s3cret"}))
    assert not header.accepts(headers(Authorization="Basic s3cret"))
    assert not AzureVerifier("digest", "s3cret").accepts(headers(Authorization="Basic s3cret"))
    assert secret_equals("abc", "abc") and secret_equals("", "")
    assert not secret_equals("abc", "abd") and not secret_equals("abc", "abcd")
