"""The control plane's own certificates, made fresh at every start (EC P-256: a few milliseconds):

- a CA (``ca.crt``/``ca.key``), which kubeconfigs trust and the controller-manager hands to pods as the root CA;
- the API server's serving certificate signed by it, valid for 127.0.0.1, localhost and the in-cluster names
  (``kubernetes``, ``kubernetes.default.svc``, ..., and the first service IP);
- the service-account key pair (``sa.key`` signs tokens, ``sa.pub`` verifies them).

Nothing here is a secret worth keeping: the folder lives and dies with the control plane.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "make_pki"]

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_pki(folder: Path, *, service_ip: str = "10.0.0.1") -> Pki:
    """Write a CA, a serving certificate and a service-account key pair into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(minutes=5)  # tolerate a little clock skew between processes

    ca_key = _key()
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("nodeflow-test-ca"))
        .issuer_name(_name("nodeflow-test-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    serving_key = _key()
    names: list[x509.GeneralName] = [
        x509.DNSName(n)
        for n in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
    serving_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = _key()
    pki = Pki(
        ca_cert=folder / "ca.crt",
        ca_key=folder / "ca.key",
        serving_cert=folder / "apiserver.crt",
        serving_key=folder / "apiserver.key",
        sa_key=folder / "sa.key",
        sa_pub=folder / "sa.pub",
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.ca_key, ca_key)
    pki.serving_cert.write_bytes(serving_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.serving_key, serving_key)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki
