"""GitHub App authentication: an installation token instead of the workflow's token.

Why: a pull request opened with the workflow's ``GITHUB_TOKEN`` starts no workflows (GitHub
does so to prevent recursive runs), and Actions may open one only when the repository allows
it. An organisation whose scan pull requests must run CI installs a GitHub App and gives the
job its id and private key: the bot signs a short-lived JWT (RS256, issuer = the app id, at
most 10 minutes) and exchanges it for an installation token, which acts as the app's bot user.

The exchange itself is in ``bot.github_client`` (the one module that imports PyGithub, whose
``Auth.AppAuth`` signs the JWT); this module checks the inputs and says which one is wrong.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional


class AppAuthError(Exception):
    """A GitHub App setting that cannot work; ``str()`` is one line naming it."""


@dataclass(frozen=True)
class AppCredentials:
    app_id: str
    private_key_pem: str
    installation_id: Optional[int] = None


def load_credentials(
    app_id: Optional[str],
    *,
    key_file: Optional[str] = None,
    key_env: str = "GRAPHMEND_APP_PRIVATE_KEY",
    installation_id: Optional[str] = None,
    env: Mapping[str, str] = os.environ,
) -> AppCredentials:
    """The app's id, private key (a PEM file, or the PEM text in ``$key_env``) and installation."""
    app = str(app_id or "").strip()
    if not re.fullmatch(r"[0-9]+|Iv[0-9A-Za-z.]+", app):
        raise AppAuthError(f"app id: expected the GitHub App's numeric id (or client id), got {app!r}")
    if key_file:
        try:
            pem = Path(key_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise AppAuthError(f"app private key {key_file}: cannot read: {exc.strerror or exc}") from None
        where = key_file
    else:
        pem = env.get(key_env, "")
        where = f"${key_env}"
        if not pem:
            raise AppAuthError(f"app private key: {where} is empty (or pass a key file)")
    pem = pem.strip().replace("\\n", "\n") + "\n"  # secrets pasted as one line keep literal \n
    if not re.match(r"-----BEGIN (RSA )?PRIVATE KEY-----\n", pem):
        raise AppAuthError(f"app private key {where}: not a PEM private key (expected '-----BEGIN ... PRIVATE KEY-----')")
    inst: Optional[int] = None
    if installation_id not in (None, ""):
        if not str(installation_id).isdigit():
            raise AppAuthError(f"installation id: expected a number, got {installation_id!r}")
        inst = int(str(installation_id))
    return AppCredentials(app, pem, inst)


def installation_token(creds: AppCredentials, repository: str, base_url: Optional[str] = None) -> str:
    """An installation token for ``repository`` (the installation is looked up when not given)."""
    from bot.github_client import GitHubError, installation_token as exchange

    try:
        return exchange(creds.app_id, creds.private_key_pem, installation_id=creds.installation_id,
                        repository=repository, base_url=base_url)
    except ValueError as exc:  # the key does not parse (PyJWT / cryptography)
        raise AppAuthError(f"app private key: cannot sign with it: {exc}") from None
    except GitHubError as exc:
        raise AppAuthError(f"GitHub App token exchange failed: {exc}") from None
