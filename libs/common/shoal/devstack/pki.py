"""Certificates and the kubeconfig for the local apiserver, made with the `openssl` command.

An EC P-256 CA signs the apiserver's serving certificate (SANs 127.0.0.1, localhost, kubernetes.default.svc,
10.0.0.1) and an admin client certificate (CN=admin, O=system:masters); an RSA key pair signs and verifies
service-account tokens. The kubeconfig authenticates the admin by a random bearer token from the apiserver's token
file (same user and group as the certificate): the apiserver verifies a client certificate's signature on every
request (an ECDSA verify: a tenth of its CPU under a benchmark's load), a token is a lookup, like the cached
service-account tokens Shoal's services use in a cluster. The certificate stays for the apiserver's own probes.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from shoal.devstack.errors import DevStackError

SERVING_SANS = (
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1"
)


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def token_file(self) -> Path:
        """The apiserver's --token-auth-file: the admin's token, user, uid and group."""
        return self.dir / "tokens.csv"

    def admin_token(self) -> str:
        return self.token_file.read_text().split(",", 1)[0]

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _openssl(*args: str, cwd: Path) -> None:
    try:
        done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise DevStackError(
            "openssl not found on PATH: run `apt-get install -y --no-install-recommends openssl`"
        ) from None
    if done.returncode != 0:
        err = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DevStackError(f"openssl {args[0]} failed: {err}")


def _ec_key(path: Path, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path), cwd=cwd)


def _sign(pki: Pki, key: Path, cert: Path, subject: str, ext: str, name: str) -> None:
    csr = pki.dir / f"{name}.csr"
    extfile = pki.dir / f"{name}.ext"
    extfile.write_text(ext)
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr), cwd=pki.dir)
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(pki.ca_cert),
        "-CAkey",
        str(pki.ca_key),
        "-CAcreateserial",
        "-days",
        "365",
        "-sha256",
        "-extfile",
        str(extfile),
        "-out",
        str(cert),
        cwd=pki.dir,
    )
    csr.unlink()
    extfile.unlink()


def make_pki(directory: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Write the CA, serving, admin and service-account keys into `directory` (about half a second).

    `extra_ips` are added to the serving certificate's SANs (a real node's apiserver address)."""
    sans = ",".join([SERVING_SANS, *(f"IP:{ip}" for ip in extra_ips)])
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    _ec_key(pki.ca_key, directory)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pki.ca_key),
        "-subj",
        "/CN=shoal-dev-ca",
        "-days",
        "365",
        "-sha256",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-out",
        str(pki.ca_cert),
        cwd=directory,
    )
    _ec_key(pki.serving_key, directory)
    _sign(
        pki,
        pki.serving_key,
        pki.serving_cert,
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
        "apiserver",
    )
    _ec_key(pki.admin_key, directory)
    _sign(
        pki,
        pki.admin_key,
        pki.admin_cert,
        "/O=system:masters/CN=admin",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
        "admin",
    )
    _openssl(
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        str(pki.sa_key),
        cwd=directory,
    )
    _openssl("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub), cwd=directory)
    pki.token_file.write_text(f'{secrets.token_hex(24)},admin,admin,"system:masters"\n')
    pki.token_file.chmod(0o600)
    return pki


def write_kubeconfig(path: Path, server: str, pki: Pki, cluster: str = "shoal-dev") -> Path:
    """A kubeconfig for the admin user (its bearer token), referring to the CA file by absolute path."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority: {pki.ca_cert.resolve()}
users:
- name: admin
  user:
    token: {pki.admin_token()}
contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: admin
current-context: {cluster}
"""
    )
    return path
