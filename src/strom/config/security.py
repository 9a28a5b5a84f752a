"""The TLS and SASL configs of a broker, with Kafka's names and defaults.

Each may also be set for one listener as ``listener.name.<listener>.<config>`` (and the SASL
ones for one mechanism of it as ``listener.name.<listener>.<mechanism>.<config>``), which wins
over the unprefixed value, as in Kafka; `strom.security.listeners` resolves them.
"""

from __future__ import annotations

from strom.config.defs import (
    INT_MAX,
    ConfigDef,
    ConfigError,
    ConfigType,
    at_least,
    between,
    one_of,
)
from strom.security.cipher_names import openssl_cipher_list

T = ConfigType


def _cipher_suites(name: str, value: list[str]) -> None:
    try:
        openssl_cipher_list(value)
    except ValueError as e:
        raise ConfigError(f"Invalid value {','.join(value)} for configuration {name}: {e}") from None


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTHBEARER_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"

SECURITY_CONFIGS = (
    # listeners
    ConfigDef("inter.broker.listener.name", T.STRING, None,
              "the listener brokers use to reach each other (default: the one of "
              "security.inter.broker.protocol)", read_only=True),
    ConfigDef("security.inter.broker.protocol", T.STRING, "PLAINTEXT",
              "security protocol between brokers when inter.broker.listener.name is not set",
              one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", case_insensitive=True),
              read_only=True),
    # authorization
    ConfigDef("authorizer.class.name", T.STRING, "",
              "the authorizer: Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer "
              "(or kafka.security.authorizer.AclAuthorizer) turns ACLs on; empty: none",
              read_only=True),
    ConfigDef("super.users", T.STRING, "",
              "principals allowed everything, separated by ';' (User:admin;User:broker)",
              read_only=True),
    ConfigDef("allow.everyone.if.no.acl.found", T.BOOLEAN, False,
              "allow a request on a resource that no ACL names", read_only=True),
    # TLS
    ConfigDef("ssl.keystore.type", T.STRING, "JKS",
              "format of the key store: PEM or PKCS12 (Strom reads no JKS files)",
              one_of("JKS", "PKCS12", "PEM", case_insensitive=True), read_only=True),
    ConfigDef("ssl.keystore.location", T.STRING, None,
              "file of the broker's private key and certificate chain", read_only=True),
    ConfigDef("ssl.keystore.password", T.PASSWORD, None, "password of the key store file",
              sensitive=True, read_only=True),
    ConfigDef("ssl.key.password", T.PASSWORD, None, "password of the private key",
              sensitive=True, read_only=True),
    ConfigDef("ssl.keystore.key", T.PASSWORD, None,
              "the private key in PEM, inline (instead of ssl.keystore.location)",
              sensitive=True, read_only=True),
    ConfigDef("ssl.keystore.certificate.chain", T.PASSWORD, None,
              "the certificate chain in PEM, inline (with ssl.keystore.key)",
              sensitive=True, read_only=True),
    ConfigDef("ssl.truststore.type", T.STRING, "JKS",
              "format of the trust store: PEM or PKCS12 (Strom reads no JKS files)",
              one_of("JKS", "PKCS12", "PEM", case_insensitive=True), read_only=True),
    ConfigDef("ssl.truststore.location", T.STRING, None,
              "file of the CA certificates trusted for client certificates", read_only=True),
    ConfigDef("ssl.truststore.password", T.PASSWORD, None, "password of the trust store file",
              sensitive=True, read_only=True),
    ConfigDef("ssl.truststore.certificates", T.PASSWORD, None,
              "trusted CA certificates in PEM, inline", sensitive=True, read_only=True),
    ConfigDef("ssl.client.auth", T.STRING, "none",
              "client certificates: required, requested or none",
              one_of("required", "requested", "none", case_insensitive=True), read_only=True),
    ConfigDef("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"],
              "TLS versions accepted", one_of("TLSv1.2", "TLSv1.3"), read_only=True),
    ConfigDef("ssl.protocol", T.STRING, "TLSv1.3",
              "the TLS protocol of the SSL context (the versions are ssl.enabled.protocols)",
              one_of("TLS", "TLSv1.2", "TLSv1.3"), read_only=True),
    ConfigDef("ssl.principal.mapping.rules", T.STRING, "DEFAULT",
              "rules mapping a client certificate's distinguished name to a principal name",
              read_only=True),
    ConfigDef("ssl.endpoint.identification.algorithm", T.STRING, "https",
              "host name verification of the brokers' certificates when brokers connect to "
              "each other ('' turns it off)", read_only=True),
    ConfigDef("ssl.cipher.suites", T.LIST, [],
              "TLS 1.2 cipher suites offered, by their IANA names (empty: OpenSSL's defaults; "
              "TLS 1.3 connections always get OpenSSL's TLS 1.3 suites)", _cipher_suites,
              read_only=True),
    ConfigDef("ssl.keymanager.algorithm", T.STRING, "SunX509", "a JVM setting",
              read_only=True, implemented=False),
    ConfigDef("ssl.trustmanager.algorithm", T.STRING, "PKIX", "a JVM setting",
              read_only=True, implemented=False),
    ConfigDef("ssl.secure.random.implementation", T.STRING, None, "a JVM setting",
              read_only=True, implemented=False),
    # SASL
    ConfigDef("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"],
              "SASL mechanisms offered on SASL listeners (Strom: PLAIN, SCRAM-SHA-256, "
              "SCRAM-SHA-512, OAUTHBEARER)", read_only=True),
    ConfigDef("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI",
              "SASL mechanism brokers use with each other", read_only=True),
    ConfigDef("sasl.jaas.config", T.PASSWORD, None,
              "JAAS login module and options (set per listener and mechanism as "
              "listener.name.<listener>.<mechanism>.sasl.jaas.config)",
              sensitive=True, read_only=True),
    ConfigDef("sasl.server.max.receive.size", T.INT, 524288,
              "largest SASL token accepted before authentication", at_least(1), read_only=True),
    ConfigDef("connections.max.reauth.ms", T.LONG, 0,
              "sessions of SASL connections last at most this long; clients re-authenticate "
              "(KIP-368; 0: no limit)", at_least(0), read_only=True),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.url", T.STRING, None,
              "JWKS of the keys that sign OAUTHBEARER tokens (a file: URL)", read_only=True),
    ConfigDef("sasl.oauthbearer.expected.audience", T.LIST, [],
              "audiences an OAUTHBEARER token must name one of", read_only=True),
    ConfigDef("sasl.oauthbearer.expected.issuer", T.STRING, None,
              "issuer an OAUTHBEARER token must name", read_only=True),
    ConfigDef("sasl.oauthbearer.sub.claim.name", T.STRING, "sub",
              "claim that names the principal", read_only=True),
    ConfigDef("sasl.oauthbearer.scope.claim.name", T.STRING, "scope",
              "claim that holds the scopes (Strom checks no scopes of signed tokens)",
              read_only=True, implemented=False),
    ConfigDef("sasl.oauthbearer.clock.skew.seconds", T.INT, 30,
              "clock difference tolerated in token times", between(0, INT_MAX), read_only=True),
    ConfigDef("sasl.oauthbearer.allow.unverified.issuer", T.BOOLEAN, False,
              "accept signed OAUTHBEARER tokens without checking their issuer (Kafka 4.4 "
              "requires sasl.oauthbearer.expected.issuer otherwise)", read_only=True),
    ConfigDef("sasl.oauthbearer.allow.unverified.audience", T.BOOLEAN, False,
              "accept signed OAUTHBEARER tokens without checking their audience (Kafka 4.4 "
              "requires sasl.oauthbearer.expected.audience otherwise)", read_only=True),
    ConfigDef("sasl.server.callback.handler.class", T.CLASS, None,
              "server callback handler (Strom: Kafka's OAuthBearerValidatorCallbackHandler "
              "for signed OAUTHBEARER tokens)", read_only=True),
    ConfigDef("sasl.login.callback.handler.class", T.CLASS, None, "a JVM class",
              read_only=True, implemented=False),
    ConfigDef("sasl.login.class", T.CLASS, None, "a JVM class", read_only=True,
              implemented=False),
    ConfigDef("sasl.kerberos.service.name", T.STRING, None, "Kerberos (GSSAPI) is not implemented",
              read_only=True, implemented=False),
    ConfigDef("sasl.kerberos.principal.to.local.rules", T.LIST, ["DEFAULT"],
              "Kerberos (GSSAPI) is not implemented", read_only=True, implemented=False),
    ConfigDef("principal.builder.class", T.CLASS, None,
              "a JVM class (Strom builds principals as Kafka's DefaultKafkaPrincipalBuilder)",
              read_only=True, implemented=False),
)
