"""GitHub App auth against the local server: a JWT signed RS256 with a key made here, checked by
the server with the app's public key, exchanged for an installation token that then works."""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.app_auth import AppAuthError, installation_token, load_credentials
from bot.github_client import GitHubClient
from tests.bot.conftest import REPO_NAME
from tests.github_server.git_data import add_app

APP_ID = 424242
INSTALLATION = 777


def _key() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.fixture
def app(github):
    private, public = _key()
    add_app(github, APP_ID, public, INSTALLATION, REPO_NAME)
    return github, private


def test_installation_token_exchange_and_the_token_works(app):
    server, private = app
    creds = load_credentials(str(APP_ID), installation_id=str(INSTALLATION), env={"GRAPHMEND_APP_PRIVATE_KEY": private})
    token = installation_token(creds, REPO_NAME, server.url)
    assert token.startswith("ghs_") and (INSTALLATION, token) in server.state.tokens_issued
    assert server.requests("POST", r"^/app/installations/777/access_tokens$") == [
        ("POST", "/app/installations/777/access_tokens", 201)]
    # The token acts as the app's bot user on the installation's repository.
    client = GitHubClient(token, REPO_NAME, base_url=server.url)
    blob = client.create_blob(b"print('hi')\n")
    assert len(blob) == 40
    assert server.state.users[token].login == "graphmend[bot]"


def test_installation_is_looked_up_from_the_repository(app):
    server, private = app
    creds = load_credentials(str(APP_ID), env={"GRAPHMEND_APP_PRIVATE_KEY": private.replace("\n", "\\n")})
    assert creds.installation_id is None
    token = installation_token(creds, REPO_NAME, server.url)
    assert server.requests("GET", r"/repos/octo/models/installation$")[0][2] == 200
    assert token in server.state.users


def test_a_jwt_signed_with_another_key_is_refused(app):
    server, _private = app
    other, _ = _key()
    creds = load_credentials(str(APP_ID), installation_id=str(INSTALLATION), env={"GRAPHMEND_APP_PRIVATE_KEY": other})
    with pytest.raises(AppAuthError, match="HTTP 401"):
        installation_token(creds, REPO_NAME, server.url)
    assert not server.state.tokens_issued


def test_the_server_checks_expiry_and_issuer(app):
    """What the server verifies, with hand-made JWTs (no PyGithub in between)."""
    import requests

    server, private = app
    now = int(time.time())
    url = f"{server.url}/app/installations/{INSTALLATION}/access_tokens"

    def post(claims: dict) -> int:
        token = jwt.encode(claims, private, algorithm="RS256")
        return requests.post(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"},
                             timeout=10).status_code

    assert post({"iat": now - 60, "exp": now + 540, "iss": str(APP_ID)}) == 201
    assert post({"iat": now - 1200, "exp": now - 600, "iss": str(APP_ID)}) == 401  # expired
    assert post({"iat": now - 60, "exp": now + 540, "iss": "999"}) == 401  # another app
    assert post({"iat": now - 60, "exp": now + 3600, "iss": str(APP_ID)}) == 401  # more than 10 minutes
    unsigned = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(APP_ID)}, "a shared secret that is not the app key", algorithm="HS256")
    assert requests.post(url, headers={"Authorization": f"Bearer {unsigned}"}, timeout=10).status_code == 401


def test_a_token_of_another_installation_cannot_be_minted(app):
    server, private = app
    creds = load_credentials(str(APP_ID), installation_id="778", env={"GRAPHMEND_APP_PRIVATE_KEY": private})
    with pytest.raises(AppAuthError, match="HTTP 404"):
        installation_token(creds, REPO_NAME, server.url)


@pytest.mark.parametrize("app_id, key, inst, match", [
    ("", "k", None, "app id"),
    ("12", "", None, r"\$GRAPHMEND_APP_PRIVATE_KEY is empty"),
    ("12", "not a key", None, "not a PEM private key"),
    ("12", "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----", "abc", "installation id"),
])
def test_bad_settings_name_the_setting(app_id, key, inst, match):
    with pytest.raises(AppAuthError, match=match):
        load_credentials(app_id, installation_id=inst, env={"GRAPHMEND_APP_PRIVATE_KEY": key})


def test_a_key_file_that_is_missing_is_one_line(tmp_path):
    with pytest.raises(AppAuthError, match=r"app private key .*nope.pem: cannot read"):
        load_credentials("12", key_file=str(tmp_path / "nope.pem"))
