#!/usr/bin/env python3
"""Mints a buyer's JSON Web Token (RFC 7519) for the tests, as a shop's login would (issue 48,
item 2): standard library only (hmac, base64, json); EdDSA through the openssl command line.

  jwt_mint.py SUB [--kid K1] [--secret-hex HEX | --secret-file F | --ed25519-key PEM]
              [--alg ALG] [--exp-in SECONDS] [--aud AUD] [--claims JSON] [--header JSON]

--keys FILE signs HS256 with the first key of a key ring file (`KID HEX` lines: auth.jwt.keys),
its kid the token's; --secret-hex signs HS256 with those bytes; --secret-file with a file's raw bytes (the
attacker's HS256-with-the-public-key); --ed25519-key signs EdDSA with a private PEM key.
--alg overrides the header's alg (e.g. none: no signature). --claims and --header are merged
over the defaults (sub, iat, exp = now + --exp-in, aud when given; alg, typ, kid)."""
import argparse, base64, hashlib, hmac, json, subprocess, sys, tempfile, time


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("sub")
    p.add_argument("--kid", default="k1")
    p.add_argument("--keys")
    p.add_argument("--secret-hex")
    p.add_argument("--secret-file")
    p.add_argument("--ed25519-key")
    p.add_argument("--alg")
    p.add_argument("--exp-in", type=int, default=600)
    p.add_argument("--aud")
    p.add_argument("--claims", default="{}")
    p.add_argument("--header", default="{}")
    a = p.parse_args()
    if a.keys:
        for line in open(a.keys):
            f = line.split()
            if len(f) == 2 and not f[0].startswith("#") and f[0] != "sign":
                a.kid, a.secret_hex = f
                break
    now = int(time.time())
    alg = a.alg or ("EdDSA" if a.ed25519_key else "HS256")
    header = {"alg": alg, "typ": "JWT", "kid": a.kid}
    header.update(json.loads(a.header))
    claims = {"sub": a.sub, "iat": now, "exp": now + a.exp_in}
    if a.aud:
        claims["aud"] = a.aud
    claims.update(json.loads(a.claims))
    for k in [k for k, v in claims.items() if v is None]:
        del claims[k]
    signing = (b64(json.dumps(header, separators=(",", ":")).encode()) + "." +
               b64(json.dumps(claims, separators=(",", ":")).encode()))
    if alg == "none":
        sig = b""
    elif a.ed25519_key:
        with tempfile.NamedTemporaryFile() as f:
            f.write(signing.encode())
            f.flush()
            sig = subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey",
                                  a.ed25519_key, "-in", f.name],
                                 check=True, capture_output=True).stdout
    else:
        key = (bytes.fromhex(a.secret_hex) if a.secret_hex
               else open(a.secret_file, "rb").read())
        sig = hmac.new(key, signing.encode(), hashlib.sha256).digest()
    print(signing + "." + b64(sig))


if __name__ == "__main__":
    sys.exit(main())
