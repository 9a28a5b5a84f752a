"""Throwaway TLS material for the runs over SSL: a CA and a broker certificate for 127.0.0.1.

Made with the ``cryptography`` package (as tests/integration/security/certs.py does), written
as PEM files into a directory of the sitting's workdir and deleted with it. Both Strom and
Kafka read the broker's key and certificate from one PEM key store (``ssl.keystore.type=PEM``,
``ssl.keystore.location``: an unencrypted PKCS#8 key followed by the certificate); the clients
trust the CA (librdkafka's ``ssl.ca.location``) and check that the certificate names 127.0.0.1.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
VALID = datetime.timedelta(days=2)  # a sitting takes minutes; the files die with its workdir


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one sitting's TLS set-up."""

    ca: Path  # the CA's certificate: what the clients trust
    key: Path  # the broker's private key (PKCS#8, unencrypted)
    cert: Path  # the broker's certificate, signed by the CA, for 127.0.0.1
    keystore: Path  # key then certificate in one file: a PEM key store

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for a client of the SSL listener (merged into every client's)."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca)}

    def client_context(self) -> ssl.SSLContext:
        """A Python TLS client context that trusts the CA and checks the host (for probes)."""
        return ssl.create_default_context(cafile=str(self.ca))

    def exist(self) -> bool:
        return all(p.is_file() for p in (self.ca, self.key, self.cert, self.keystore))


def files_in(directory: Path) -> TlsFiles:
    """Where :func:`make_certificates` puts its files in ``directory``."""
    return TlsFiles(
        ca=directory / "ca.pem",
        key=directory / "broker.key",
        cert=directory / "broker.crt",
        keystore=directory / "broker.pem",
    )


def make_certificates(directory: Path, host: str = HOST) -> TlsFiles:
    """A new CA and a broker certificate for ``host`` (an IP address), as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + VALID

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "strom bench CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cert_pem = cert.public_bytes(pem)
    files = files_in(directory)
    files.ca.write_bytes(ca.public_bytes(pem))
    files.key.write_bytes(key_pem)
    files.cert.write_bytes(cert_pem)
    files.keystore.write_bytes(key_pem + cert_pem)
    return files


def sitting_certificates(workdir: Path) -> TlsFiles:
    """The sitting's certificates in ``workdir/tls``, made on first use and reused after."""
    files = files_in(workdir / "tls")
    return files if files.exist() else make_certificates(workdir / "tls")
