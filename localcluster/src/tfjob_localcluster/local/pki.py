"""Certificates for the local control plane: one CA, serving and client certificates.

ECDSA P-256 keys keep generation fast; every component accepts them. Client
certificates carry the Kubernetes identity the API server reads from them: the
common name is the user, each organization a group.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A private key and its certificate (or, for a bare signing key, its public key)."""

    cert: Path
    key: Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class CertificateAuthority:
    """A CA whose key and certificate live in `directory` (reused when present)."""

    def __init__(self, directory: Path, common_name: str = "tfjob-localcluster-ca") -> None:
        self.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        if self.pair.cert.exists() and self.pair.key.exists():
            self._cert = x509.load_pem_x509_certificate(self.pair.cert.read_bytes())
            loaded = serialization.load_pem_private_key(self.pair.key.read_bytes(), None)
            if not isinstance(loaded, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{self.pair.key} is not an EC private key")
            self._key = loaded
            return
        self._key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + 10 * VALIDITY)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        _write_private(self.pair.key, _key_pem(self._key))
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        cert_path: Path,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        """Writes `<cert_path>` and its key next to it (`.key`); returns both paths."""
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        if not usages:
            raise ValueError("a certificate needs server or client usage")
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(cert_path, cert_path.with_suffix(".key"))
        _write_private(pair.key, _key_pem(key))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair


def write_signing_key(path: Path) -> KeyPair:
    """The service-account token signing key (`.key`) and its public half (`.pub`)."""
    pair = KeyPair(cert=path.with_suffix(".pub"), key=path.with_suffix(".key"))
    if not pair.key.exists():
        _write_private(pair.key, _key_pem(_new_key()))
    loaded = serialization.load_pem_private_key(pair.key.read_bytes(), None)
    pair.cert.write_bytes(
        loaded.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair


def tls_context(ca_cert: Path, client: KeyPair | None = None) -> ssl.SSLContext:
    """A TLS context that trusts the cluster's CA, as `client` if given."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context
