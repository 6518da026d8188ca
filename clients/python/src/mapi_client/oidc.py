"""Signing in without a browser where the platform allows it.

``dev_idp_login`` asks the development identity provider of ``mapi dev``
(the ``dev`` profile only) for an ID token of one of its seeded accounts,
valid for an hour, and opens a session with it: the token is then a
bearer of that person for the API (``MAPI_TOKEN``, or ``Client(token=…)``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ._client import MapiError


def _post(url: str, body=None, token=None, timeout: float = 30.0):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        try:
            problem = json.loads(e.read())
        except ValueError:
            problem = {}
        raise MapiError(e.code, problem.get("code", str(e.code)), problem.get("detail", e.reason), problem) from None
    except urllib.error.URLError as e:
        raise MapiError(0, "UNAVAILABLE", f"{url} could not be reached ({e.reason}): is `mapi dev` running?") from e


def dev_idp_login(url: str, email: str) -> str:
    """An ID token of ``email`` from the development identity provider at
    ``url`` (a ``mapi dev`` platform), signed in; raises :class:`MapiError`
    where there is no such provider or account."""
    base = url.rstrip("/")
    answer = _post(f"{base}/dev/idp/login", {"email": email})
    token = answer["id_token"]
    _post(f"{base}/v1/sessions", token=token)
    return token
