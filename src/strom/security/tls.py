"""TLS contexts from Kafka's ssl.* configs (PEM or PKCS12 key and trust stores).

Python's ssl module loads keys and certificates from files only, so inline PEM configs
(``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``) and PKCS12 stores (read with
`cryptography`) pass through a private temporary file that is deleted at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.config.defs import ConfigError
from strom.security.cipher_names import openssl_cipher_list

Setting = Callable[[str], Any]  # the value of a config for the listener being built

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


class TlsConfigError(ConfigError):
    """The TLS settings of a listener cannot be used; the message names the config."""


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="strom-tls-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _read(location: str, name: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"{name}={location}: {e.strerror or e}") from None


def _password(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) and value else None


def _pkcs12_to_pem(data: bytes, password: bytes | None, name: str,
                   *, want_key: bool) -> tuple[bytes, list[bytes]]:
    """(private key PEM or b'', certificate PEMs) of a PKCS12 store."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password)
    except ValueError as e:
        raise TlsConfigError(f"{name}: cannot read the PKCS12 store: {e}") from None
    certs = [c.public_bytes(serialization.Encoding.PEM) for c in ([cert] if cert else []) + extra]
    if not want_key:
        return b"", certs
    if key is None:
        raise TlsConfigError(f"{name}: the PKCS12 store holds no private key")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return pem, certs


def _load_keystore(ctx: ssl.SSLContext, get: Setting) -> None:
    kind = (get("ssl.keystore.type") or "JKS").upper()
    location, inline_key = get("ssl.keystore.location"), get("ssl.keystore.key")
    key_password = _password(get("ssl.key.password"))
    if inline_key:
        chain = get("ssl.keystore.certificate.chain")
        if kind != "PEM" or not chain:
            raise TlsConfigError("ssl.keystore.key needs ssl.keystore.type=PEM and "
                                 "ssl.keystore.certificate.chain")
        if location:
            raise TlsConfigError("set either ssl.keystore.location or ssl.keystore.key, not both")
        with _private_file(inline_key.encode() + b"\n" + chain.encode()) as path:
            _load_chain(ctx, path, key_password, "ssl.keystore.key")
        return
    if not location:
        raise TlsConfigError("a TLS listener needs ssl.keystore.location (or ssl.keystore.key "
                             "and ssl.keystore.certificate.chain)")
    if kind == "PEM":
        _load_chain(ctx, location, key_password, "ssl.keystore.location")
    elif kind == "PKCS12":
        store_password = _password(get("ssl.keystore.password"))
        key, certs = _pkcs12_to_pem(_read(location, "ssl.keystore.location"), store_password,
                                    "ssl.keystore.location", want_key=True)
        with _private_file(key + b"".join(certs)) as path:
            _load_chain(ctx, path, None, "ssl.keystore.location")
    else:
        raise TlsConfigError(f"ssl.keystore.type={kind} is not supported by Strom: use PEM or "
                             f"PKCS12 (keytool -importkeystore converts a JKS store to PKCS12)")


def _no_password() -> bytes:
    raise TlsConfigError("the private key is encrypted but ssl.key.password is not set")


def _load_chain(ctx: ssl.SSLContext, path: str, password: bytes | None, name: str) -> None:
    try:
        # without a password, OpenSSL would ask for one on the terminal: never wait for that
        ctx.load_cert_chain(path, password=password if password is not None else _no_password)
    except FileNotFoundError:
        raise TlsConfigError(f"{name}: {path} does not exist") from None
    except TlsConfigError as e:
        raise TlsConfigError(f"{name}: {e}") from None
    except (ssl.SSLError, OSError) as e:
        reason = getattr(e, "reason", None) or str(e)
        raise TlsConfigError(f"{name}: cannot load the private key and certificate chain "
                             f"({reason}); is ssl.key.password right?") from None


def _load_truststore(ctx: ssl.SSLContext, get: Setting) -> bool:
    """Trusted CAs; False when none are configured."""
    kind = (get("ssl.truststore.type") or "JKS").upper()
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
            return True
        if not location:
            return False
        if kind == "PEM":
            try:
                ctx.load_verify_locations(cafile=location)
            except FileNotFoundError:
                raise TlsConfigError(f"ssl.truststore.location={location}: no such file") from None
        elif kind == "PKCS12":
            _, certs = _pkcs12_to_pem(_read(location, "ssl.truststore.location"),
                                      _password(get("ssl.truststore.password")),
                                      "ssl.truststore.location", want_key=False)
            ctx.load_verify_locations(cadata=b"".join(certs).decode())
        else:
            raise TlsConfigError(f"ssl.truststore.type={kind} is not supported by Strom: use "
                                 f"PEM or PKCS12")
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"cannot load the trust store: {e}") from None
    return True


def _versions(ctx: ssl.SSLContext, get: Setting) -> None:
    enabled = sorted(_VERSIONS[v] for v in get("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"])
    ctx.minimum_version, ctx.maximum_version = enabled[0], enabled[-1]


def _cipher_suites(ctx: ssl.SSLContext, get: Setting) -> None:
    """ssl.cipher.suites (IANA names) restricts the TLS 1.2 suites; empty keeps OpenSSL's."""
    suites = get("ssl.cipher.suites") or []
    if not suites:
        return
    try:
        ctx.set_ciphers(openssl_cipher_list(suites))
    except ValueError as e:
        raise TlsConfigError(f"ssl.cipher.suites: {e}") from None
    except ssl.SSLError as e:  # OpenSSL takes none of them (its security level)
        raise TlsConfigError(f"ssl.cipher.suites: OpenSSL accepts none of "
                             f"{','.join(suites)}: {e}") from None


def server_context(get: Setting) -> ssl.SSLContext:
    """The SSLContext of a TLS listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, get)
    _cipher_suites(ctx, get)
    _load_keystore(ctx, get)
    auth = (get("ssl.client.auth") or "none").lower()
    has_trust = _load_truststore(ctx, get)
    if auth != "none" and not has_trust:
        raise TlsConfigError(f"ssl.client.auth={auth} needs trusted CA certificates "
                             f"(ssl.truststore.location or ssl.truststore.certificates)")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def client_context(get: Setting) -> ssl.SSLContext:
    """The SSLContext a broker uses to reach another broker's TLS listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, get)
    _cipher_suites(ctx, get)
    if not _load_truststore(ctx, get):
        ctx.load_default_certs()
    if get("ssl.keystore.location") or get("ssl.keystore.key"):
        _load_keystore(ctx, get)
    ctx.check_hostname = bool(get("ssl.endpoint.identification.algorithm"))
    return ctx


def peer_distinguished_name(ssl_object: Any) -> str | None:
    """The client certificate's subject as RFC 2253 text (most specific name first, as Java's
    X500Principal.getName()), or None when the client sent no certificate."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----\s*", re.S)


def _pem_blocks(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """(private key blocks, certificate blocks) of a PEM text."""
    keys: list[bytes] = []
    certs: list[bytes] = []
    for m in _PEM_BLOCK.finditer(data):
        (keys if b"PRIVATE KEY" in m.group(1) else certs).append(m.group(0))
    return keys, certs


def _unencrypted_key(pem: bytes, password: bytes | None, name: str) -> bytes:
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(pem, password)
    except (ValueError, TypeError) as e:
        raise TlsConfigError(f"{name}: cannot read the private key ({e}); is ssl.key.password "
                             "right?") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class LoopbackTls:
    """How another process of this broker (the HTTP API) reaches one of its TLS listeners:
    trusting the listener's trust store, or without one the certificates of its own key store
    (its own certificate, self-signed or with its chain), and presenting the key store's
    certificate when the listener asks for client certificates. The host name is not checked:
    the connection goes to the broker's own address, not the name its certificate carries."""

    ca_pem: str
    cert_pem: str | None = None
    key_pem: str | None = None

    @classmethod
    def of(cls, fields: Mapping[str, str | None] | None) -> LoopbackTls | None:
        """From its fields as a helper process's hand-off carries them (None: no TLS)."""
        if fields is None:
            return None
        return cls(str(fields["ca_pem"]), fields.get("cert_pem"), fields.get("key_pem"))

    def librdkafka(self) -> dict[str, str]:
        out = {"ssl.ca.pem": self.ca_pem, "ssl.endpoint.identification.algorithm": "none"}
        if self.cert_pem and self.key_pem:
            out.update({"ssl.certificate.pem": self.cert_pem, "ssl.key.pem": self.key_pem})
        return out

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.load_verify_locations(cadata=self.ca_pem)
        if self.cert_pem and self.key_pem:
            with _private_file((self.key_pem + self.cert_pem).encode()) as path:
                ctx.load_cert_chain(path)
        return ctx


def loopback_tls(get: Setting) -> LoopbackTls:
    """`LoopbackTls` from a listener's ssl.* settings (PEM or PKCS12 stores, inline or files)."""
    kind = (get("ssl.keystore.type") or "JKS").upper()
    key_password = _password(get("ssl.key.password"))
    if get("ssl.keystore.key"):
        key_pems = [get("ssl.keystore.key").encode()]
        certs = _pem_blocks(get("ssl.keystore.certificate.chain").encode())[1]
    elif kind == "PKCS12":
        key, certs = _pkcs12_to_pem(_read(get("ssl.keystore.location"), "ssl.keystore.location"),
                                    _password(get("ssl.keystore.password")),
                                    "ssl.keystore.location", want_key=True)
        key_pems, key_password = [key], None
    else:
        key_pems, certs = _pem_blocks(_read(get("ssl.keystore.location"),
                                            "ssl.keystore.location"))
    if not key_pems or not certs:
        raise TlsConfigError("ssl.keystore.location: no private key and certificate found")
    key_pem = _unencrypted_key(key_pems[0], key_password, "ssl.keystore")
    trust_kind = (get("ssl.truststore.type") or "JKS").upper()
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if inline:
        trusted = _pem_blocks(inline.encode())[1]
    elif location and trust_kind == "PKCS12":
        trusted = _pkcs12_to_pem(_read(location, "ssl.truststore.location"),
                                 _password(get("ssl.truststore.password")),
                                 "ssl.truststore.location", want_key=False)[1]
    elif location:
        trusted = _pem_blocks(_read(location, "ssl.truststore.location"))[1]
    else:
        trusted = certs
    return LoopbackTls(b"".join(trusted).decode(), b"".join(certs).decode(), key_pem.decode())
