"""tests/k8s/scripts/gen-certs.sh with Python's cryptography, for a host without the openssl command
(run.sh uses it only there): the same files, names and subjects in the same folder.

    PKI=<folder> [VGPU_K8S_NODE_NAME=<node>] python3 pki.py
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAYS = 7
APISERVER_NAMES = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
APISERVER_IPS = ["127.0.0.1", "10.96.0.1"]


def new_key(folder: Path, name: str) -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    path = folder / f"{name}.key"
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return key


def subject(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(
    folder: Path,
    name: str,
    who: x509.Name,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    usage: x509.ObjectIdentifier | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """<name>.key and <name>.crt: the CA when ca is None, else a leaf signed by it."""
    key = new_key(folder, name)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(who)
        .issuer_name(ca[0].subject if ca else who)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=ca is None)
    )
    usages = dict.fromkeys(
        [
            "digital_signature",
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "key_cert_sign",
            "crl_sign",
            "encipher_only",
            "decipher_only",
        ],
        False,
    )
    if ca is None:
        usages.update(key_cert_sign=True, crl_sign=True)
    elif usage is not None:
        usages.update(digital_signature=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    builder = builder.add_extension(x509.KeyUsage(**usages), critical=True)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca[1] if ca else key, hashes.SHA256())
    (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def main() -> None:
    folder = Path(os.environ["PKI"])
    folder.mkdir(parents=True, exist_ok=True)
    ca = issue(folder, "ca", subject("vgpu-e2e-ca"), None)
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
    sans += [x509.DNSName(dns) for dns in APISERVER_NAMES]
    issue(folder, "apiserver", subject("kube-apiserver"), ca, usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=sans)
    client = ExtendedKeyUsageOID.CLIENT_AUTH
    issue(folder, "admin", subject("vgpu-e2e-admin", "system:masters"), ca, usage=client)
    issue(folder, "controller-manager", subject("system:kube-controller-manager"), ca, usage=client)
    issue(folder, "scheduler", subject("system:kube-scheduler"), ca, usage=client)
    node = os.environ.get("VGPU_K8S_NODE_NAME")
    if node:
        issue(folder, "kubelet", subject(f"system:node:{node}", "system:nodes"), ca, usage=client)
    sa = new_key(folder, "sa")
    (folder / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


if __name__ == "__main__":
    main()
