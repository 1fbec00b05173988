"""The webhook's TLS material: given files (cert-manager / certgen in a cluster), or a self-signed CA and a
serving certificate for 127.0.0.1/localhost made with openssl (local stack and tests)."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from shoal.errors import ConfigError


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path | None  # the CA that signed `cert` (for the webhook configurations' caBundle)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def ca_bundle(self) -> bytes:
        return (self.ca or self.cert).read_bytes()


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)  # noqa: S603,S607
    if done.returncode != 0:
        raise ConfigError([f"openssl {args[0]} failed: {done.stderr.strip()[:500]}"])


def self_signed(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A P-256 CA and a serving certificate for `hosts` (IPs and DNS names) in `directory`; reused if present."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(cert=directory / "tls.crt", key=directory / "tls.key", ca=directory / "ca.crt")
    if files.cert.exists() and files.key.exists() and (directory / "ca.crt").exists():
        return files
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=shoal-admission-ca", cwd=directory)
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={hosts[0]}", cwd=directory)
    sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    (directory / "ext.cnf").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"
                                       f"keyUsage=digitalSignature,keyEncipherment\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "tls.crt", "-days", "825", "-extfile", "ext.cnf", cwd=directory)
    return files
