#!/usr/bin/env python3
"""Verify a mapi model version's bundle outside the platform.

Checks, with the general-purpose `cryptography` library and nothing of
mapi's code (docs/bundle-format.md states the format):

1. the manifest's bytes hash to the SHA-256 the version recorded;
2. its signature verifies under the signing key it names, taken from the
   platform's JSON Web Key Set (`GET /v1/signing-keys`), or from a key set
   saved earlier (`--keys FILE`: trust what you pinned, not what a server
   answers today);
3. the manifest is of the version's bundle, and every artifact it lists,
   downloaded through the version's signed URLs, has its size and SHA-256.

    python3 examples/verify_bundle.py --url http://127.0.0.1:8080 --token "$MAPI_TOKEN" mv_01…

Exit status 0 when everything verified, 1 with the reason otherwise.
"""

import argparse
import base64
import hashlib
import json
import sys
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa


class Failed(Exception):
    """A check that did not pass, in words."""


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def number(text):
    return int.from_bytes(b64url(text), "big")


def call(url, token=None, method="GET"):
    request = urllib.request.Request(url, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read()


def public_key(jwk):
    """The key of one JSON Web Key (RFC 7518: EC P-256 or RSA)."""
    if jwk["kty"] == "EC" and jwk.get("crv") == "P-256":
        return ec.EllipticCurvePublicNumbers(number(jwk["x"]), number(jwk["y"]), ec.SECP256R1()).public_key()
    if jwk["kty"] == "RSA":
        return rsa.RSAPublicNumbers(number(jwk["e"]), number(jwk["n"])).public_key()
    raise Failed(f"key {jwk.get('kid')}: unsupported key type {jwk['kty']}")


def verify_signature(keys, message, signature):
    """The signature over `message` under the key it names: ECDSA with
    SHA-256 (DER-encoded) or RSA-PSS with SHA-256 and a 32-byte salt."""
    kid = signature["key_version"]
    jwk = next((k for k in keys["keys"] if k["kid"] == kid), None)
    if jwk is None:
        raise Failed(f"the signature names key {kid}, which the key set does not hold")
    if jwk.get("algorithm", signature["algorithm"]) != signature["algorithm"]:
        raise Failed(f"key {kid} is {jwk['algorithm']}, the signature says {signature['algorithm']}")
    value = base64.b64decode(signature["value"])
    key = public_key(jwk)
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(value, message, ec.ECDSA(hashes.SHA256()))
        else:
            pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
            key.verify(value, message, pss, hashes.SHA256())
    except InvalidSignature:
        raise Failed(f"the manifest's signature does not verify under key {kid}") from None
    return kid


def verify(base, token, version, keys):
    signed = json.loads(call(f"{base}/v1/model-versions/{version}/manifest", token))
    message = signed["manifest"].encode("utf-8")
    digest = hashlib.sha256(message).hexdigest()
    if digest != signed["manifest_sha256"]:
        raise Failed(f"the manifest hashes to {digest}, not the recorded {signed['manifest_sha256']}")
    kid = verify_signature(keys, message, signed["signature"])
    manifest = json.loads(message)
    links = json.loads(call(f"{base}/v1/model-versions/{version}/urls", token, method="POST"))
    by_key = {a["key"]: a for a in links["artifacts"]}
    for artifact in manifest["artifacts"]:
        if not artifact["key"].startswith(manifest["bundle"].rsplit("/", 1)[0] + "/"):
            raise Failed(f"{artifact['key']} lies outside the bundle's run")
        link = by_key.get(artifact["key"])
        if link is None:
            raise Failed(f"no download link for {artifact['key']}")
        data = call(link["url"])
        if len(data) != artifact["size"] or hashlib.sha256(data).hexdigest() != artifact["sha256"]:
            raise Failed(f"{artifact['key']} is not the artifact the manifest pins")
    return kid, len(manifest["artifacts"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the platform's address")
    parser.add_argument("--token", required=True, help="an API token or session that may read the version")
    parser.add_argument("--keys", help="a JSON Web Key Set saved earlier, instead of the platform's")
    parser.add_argument("version", help="the model version (mv_…)")
    args = parser.parse_args()
    base = args.url.rstrip("/")
    try:
        if args.keys:
            with open(args.keys, encoding="utf-8") as f:
                keys = json.load(f)
        else:
            keys = json.loads(call(f"{base}/v1/signing-keys"))
        kid, count = verify(base, args.token, args.version, keys)
    except Failed as e:
        print(f"not verified: {e}", file=sys.stderr)
        return 1
    except urllib.error.HTTPError as e:
        print(f"not verified: {e.url} answered {e.code}: {e.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    print(f"verified {args.version}: the manifest, its signature by {kid}, and {count} artifacts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
