"""The stand-in for kube-webhook-certgen in local clusters that cannot pull it: the `create` and `patch` commands
deploy/k8s/overlays/dev/admission-certgen.yaml runs, with the same flags and Secret keys (ca, cert, key).

    certgen.py create --host=a,b.ns.svc --namespace=NS --secret-name=NAME   # a CA + serving cert, unless present
    certgen.py patch --webhook-name=NAME --namespace=NS --secret-name=NAME  # caBundle of both configurations

Only the Python standard library and the `openssl` command; nothing is written to disk (the container's root
filesystem is read-only): keys and certificates pass through pipes. Talks to the API server with the pod's
ServiceAccount token. Runs in the stand-in image, not in Shoal's services.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DAYS = "3650"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def api(method: str, path: str, body: object = None, content_type: str = "application/json") -> dict:
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    with open(f"{SA_DIR}/token", encoding="utf-8") as handle:
        token = handle.read().strip()
    context = ssl.create_default_context(cafile=f"{SA_DIR}/ca.crt")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"https://{host}:{port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": content_type,
                                              "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise ApiError(exc.code, exc.read().decode(errors="replace")[:300]) from None


def openssl(*args: str, stdin: bytes = b"", extra: dict[str, bytes] | None = None) -> bytes:
    """Run openssl; `extra` names /dev/fd/N paths in `args` as {placeholder: data} passed through pipes."""
    fds, argv = [], list(args)
    for placeholder, data in (extra or {}).items():
        read, write = os.pipe()
        os.write(write, data)  # a few KB: fits the pipe's buffer
        os.close(write)
        fds.append(read)
        argv = [a.replace(placeholder, f"/dev/fd/{read}") for a in argv]
    try:
        done = subprocess.run(["openssl", *argv], input=stdin, capture_output=True, pass_fds=fds, check=False)
    finally:
        for fd in fds:
            os.close(fd)
    if done.returncode != 0:
        raise SystemExit(f"certgen: openssl {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def make_certificates(hosts: list[str]) -> dict[str, bytes]:
    """A self-signed EC P-256 CA and a serving certificate for `hosts` signed by it (PEM)."""
    new_key = ("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    ca_key = openssl(*new_key)
    ca = openssl("req", "-x509", "-new", "-key", "/dev/stdin", "-subj", "/CN=shoal-webhook-ca", "-days", DAYS,
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", stdin=ca_key)
    key = openssl(*new_key)
    sans = ",".join(f"DNS:{h}" for h in hosts)
    csr = openssl("req", "-new", "-key", "/dev/stdin", "-subj", f"/CN={hosts[0]}",
                  "-addext", f"subjectAltName={sans}", stdin=key)
    cert = openssl("x509", "-req", "-in", "/dev/stdin", "-CA", "@CA@", "-CAkey", "@CAKEY@", "-days", DAYS,
                   "-set_serial", str(secrets.randbits(63)), "-copy_extensions", "copy",
                   stdin=csr, extra={"@CA@": ca, "@CAKEY@": ca_key})
    return {"ca": ca, "cert": cert, "key": key}


def create(args: argparse.Namespace) -> None:
    path = f"/api/v1/namespaces/{args.namespace}/secrets"
    try:
        api("GET", f"{path}/{args.secret_name}")
        print(f"certgen: secret {args.namespace}/{args.secret_name} exists: reused")
        return
    except ApiError as exc:
        if exc.status != 404:
            raise
    pems = make_certificates([h for h in args.host.split(",") if h])
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": args.secret_name},
              "data": {name: base64.b64encode(pem).decode() for name, pem in pems.items()}}
    try:
        api("POST", path, secret)
    except ApiError as exc:
        if exc.status != 409:  # made by a concurrent run: that one stands
            raise
    print(f"certgen: secret {args.namespace}/{args.secret_name} created")


def patch(args: argparse.Namespace) -> None:
    secret = api("GET", f"/api/v1/namespaces/{args.namespace}/secrets/{args.secret_name}")
    ca = (secret.get("data") or {}).get("ca")
    if not ca:
        raise SystemExit(f"certgen: secret {args.namespace}/{args.secret_name} has no key 'ca'")
    for kind in ("mutating", "validating"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{args.webhook_name}"
        config = api("GET", path)
        ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca}
               for i in range(len(config.get("webhooks") or []))]
        if ops:
            api("PATCH", path, ops, content_type="application/json-patch+json")
        print(f"certgen: {kind} webhook configuration {args.webhook_name}: caBundle set on {len(ops)} webhooks")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="certgen", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("create")
    made.add_argument("--host", required=True)
    patched = commands.add_parser("patch")
    patched.add_argument("--webhook-name", required=True)
    for sub in (made, patched):
        sub.add_argument("--namespace", required=True)
        sub.add_argument("--secret-name", required=True)
    args = parser.parse_args(argv)
    try:
        (create if args.command == "create" else patch)(args)
    except (ApiError, OSError) as exc:
        print(f"certgen: {args.command} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
