"""Each listener's security, built once at start-up from Kafka's configs: its TLS context, how
its clients' principals are found, and the SASL mechanisms it offers.

Settings are looked up as Kafka does: ``listener.name.<listener>.<mechanism>.<config>`` (SASL
per mechanism), then ``listener.name.<listener>.<config>``, then ``<config>``. Two Kafka
exceptions are kept: an unprefixed ``sasl.jaas.config`` is ignored with a WARN, and on a
SASL_SSL listener only a listener-prefixed ``ssl.client.auth`` counts.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.config.broker import BROKER_CONFIGS, BrokerConfig
from strom.config.defs import ConfigError
from strom.config.listeners import Listener
from strom.config.security import OAUTHBEARER_VALIDATOR
from strom.security.jaas import JaasError, single_module
from strom.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule, SslPrincipalMapper
from strom.security.sasl.mechanisms import (
    SCRAM_MECHANISMS,
    CredentialLookup,
    PlainExchange,
    SaslExchange,
    ScramExchange,
)
from strom.security.sasl.oauthbearer import (
    JwksValidator,
    OAuthBearerExchange,
    TokenValidator,
    UnsecuredValidator,
    jwks_path,
)
from strom.security.session import SaslSettings, Session
from strom.security.tls import peer_distinguished_name, server_context

log = logging.getLogger("strom.security")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
# Kafka's older name of the signed-token validator (before KIP-768 moved it)
_VALIDATORS = (OAUTHBEARER_VALIDATOR,
               "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")


class AuthenticationError(Exception):
    """A connection cannot be given a principal (e.g. no principal mapping rule matched)."""


class ListenerSettings:
    """The effective value of any broker config for one listener (and SASL mechanism)."""

    def __init__(self, config: BrokerConfig, listener: Listener) -> None:
        self.config = config
        self.listener = listener
        self.prefix = f"listener.name.{listener.name.lower()}."

    def get(self, name: str, mechanism: str | None = None) -> Any:
        keys = [f"{self.prefix}{name}"]
        if mechanism is not None:
            keys.insert(0, f"{self.prefix}{mechanism.lower()}.{name}")
        for key in keys:
            raw = self.config.unknown.get(key)
            if raw is not None:
                return BROKER_CONFIGS.parse(name, raw) if name in BROKER_CONFIGS else raw
        if name == "sasl.jaas.config":
            return None  # Kafka ignores an unprefixed one (checks.py warns)
        if name == "ssl.client.auth" and self.listener.sasl:
            return "none"
        return self.config.get(name)

    def for_mechanism(self, mechanism: str) -> Callable[[str], Any]:
        return functools.partial(self.get, mechanism=mechanism)


@dataclass(frozen=True)
class ListenerSecurity:
    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl: SaslSettings | None = None

    def new_session(self, peer: str, ssl_object: Any = None) -> Session:
        """The session of a new connection; AuthenticationError fails the connection."""
        principal = ANONYMOUS
        if ssl_object is not None and self.principal_mapper is not None and self.sasl is None:
            dn = peer_distinguished_name(ssl_object)
            if dn is not None:
                try:
                    principal = KafkaPrincipal.user(self.principal_mapper.principal_name(dn))
                except NoMatchingRule as e:
                    raise AuthenticationError(
                        f"Failed to map name for '{dn}' based on SSL principal mapping rules."
                    ) from e
        return Session(self.listener.name, self.listener.protocol, peer, principal, self.sasl)


def build_listener_security(config: BrokerConfig, listener: Listener,
                            scram_credentials: CredentialLookup) -> ListenerSecurity:
    """The security of one listener; ConfigError names what is wrong or not supported."""
    settings = ListenerSettings(config, listener)
    ssl_context = mapper = sasl = None
    if listener.tls:
        try:
            ssl_context = server_context(settings.get)
        except ConfigError as e:
            raise ConfigError(f"listener {listener.name}: {e}") from None
        try:
            mapper = SslPrincipalMapper(settings.get("ssl.principal.mapping.rules") or "DEFAULT")
        except ValueError as e:
            raise ConfigError(f"listener {listener.name}: ssl.principal.mapping.rules: {e}") from None
    if listener.sasl:
        sasl = _sasl_settings(settings, scram_credentials)
    return ListenerSecurity(listener, ssl_context, mapper, sasl)


def _sasl_settings(settings: ListenerSettings, scram_credentials: CredentialLookup) -> SaslSettings:
    name = settings.listener.name
    enabled = [m.strip() for m in settings.get("sasl.enabled.mechanisms") or [] if m.strip()]
    if not enabled:
        raise ConfigError(f"listener {name} uses {settings.listener.protocol} but "
                          f"sasl.enabled.mechanisms is empty")
    factories: dict[str, Callable[[], SaslExchange]] = {}
    reauth: dict[str, int] = {}
    for mechanism in enabled:
        if mechanism == "GSSAPI":
            raise ConfigError(
                f"listener {name}: SASL mechanism GSSAPI (Kerberos, Kafka's default for "
                f"sasl.enabled.mechanisms) is not implemented by Strom; set "
                f"sasl.enabled.mechanisms to some of {', '.join(SUPPORTED_MECHANISMS)}")
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"listener {name}: SASL mechanism {mechanism} is not supported "
                              f"(supported: {', '.join(SUPPORTED_MECHANISMS)})")
        handler = settings.get("sasl.server.callback.handler.class", mechanism)
        if handler and not (mechanism == "OAUTHBEARER" and handler in _VALIDATORS):
            raise ConfigError(f"listener {name}: a custom sasl.server.callback.handler.class for "
                              f"{mechanism} is not supported by Strom")
        if mechanism == "PLAIN":
            factories[mechanism] = functools.partial(PlainExchange, _plain_users(settings))
        elif mechanism == "OAUTHBEARER":
            validator = _oauthbearer_validator(settings, bool(handler))
            factories[mechanism] = functools.partial(OAuthBearerExchange, validator)
        else:
            factories[mechanism] = functools.partial(ScramExchange, mechanism, scram_credentials)
        reauth[mechanism] = int(settings.get("connections.max.reauth.ms", mechanism) or 0)
    return SaslSettings(factories, reauth,
                        max_receive_size=int(settings.get("sasl.server.max.receive.size")))


def _plain_users(settings: ListenerSettings) -> dict[str, str]:
    """user_<name>="<password>" entries of the listener's PLAIN JAAS config."""
    key = f"{settings.prefix}plain.sasl.jaas.config"
    text = settings.get("sasl.jaas.config", "PLAIN")
    if not text:
        raise ConfigError(f"listener {settings.listener.name} enables SASL mechanism PLAIN but "
                          f"{key} is not set (e.g. {PLAIN_LOGIN_MODULE} required "
                          f'user_alice="alice-secret";)')
    try:
        module = single_module(text, key)
    except JaasError as e:
        raise ConfigError(str(e)) from None
    if module.class_name != PLAIN_LOGIN_MODULE:
        raise ConfigError(f"{key}: PLAIN needs the login module {PLAIN_LOGIN_MODULE}, not "
                          f"{module.class_name}")
    users = {k[len("user_"):]: v for k, v in module.options.items() if k.startswith("user_")}
    if not users:
        log.warning("%s defines no user_<name> entries: no client can authenticate with PLAIN "
                    "on listener %s", key, settings.listener.name)
    return users


def _oauthbearer_validator(settings: ListenerSettings, signed: bool) -> TokenValidator:
    """Kafka's validators: signed tokens checked against a JWKS when the listener names
    OAuthBearerValidatorCallbackHandler, else the unsecured validator (for development)."""
    name = settings.listener.name
    get = settings.for_mechanism("OAUTHBEARER")
    if not signed:
        options = _jaas_options(settings, "OAUTHBEARER")
        log.warning("listener %s accepts unsecured OAUTHBEARER tokens: any client can claim any "
                    "identity (Kafka's default, for development; set listener.name.%s."
                    "oauthbearer.sasl.server.callback.handler.class=%s and a JWKS to check "
                    "signed tokens)", name, name.lower(), OAUTHBEARER_VALIDATOR)
        try:
            skew = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
        except ValueError:
            raise ConfigError("unsecuredValidatorAllowableClockSkewMs must be a number") from None
        if skew < 0:
            raise ConfigError(f"Allowable clock skew millis must not be negative: {skew}")
        return UnsecuredValidator(
            principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "sub"),
            scope_claim=options.get("unsecuredValidatorScopeClaimName", "scope"),
            required_scope=tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            clock_skew_ms=skew)
    url = get("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError(f"listener {name}: {OAUTHBEARER_VALIDATOR} needs "
                          f"sasl.oauthbearer.jwks.endpoint.url (a file: URL)")
    issuer = get("sasl.oauthbearer.expected.issuer")
    audience = [a for a in get("sasl.oauthbearer.expected.audience") or [] if a]
    # Kafka 4.4: an unchecked issuer or audience must be asked for explicitly
    if not issuer and not get("sasl.oauthbearer.allow.unverified.issuer"):
        raise ConfigError(f"listener {name}: set sasl.oauthbearer.expected.issuer (or "
                          f"sasl.oauthbearer.allow.unverified.issuer=true)")
    if not audience and not get("sasl.oauthbearer.allow.unverified.audience"):
        raise ConfigError(f"listener {name}: set sasl.oauthbearer.expected.audience (or "
                          f"sasl.oauthbearer.allow.unverified.audience=true)")
    try:
        return JwksValidator(jwks_path(url), issuer=issuer or None, audience=audience,
                             principal_claim=get("sasl.oauthbearer.sub.claim.name") or "sub",
                             clock_skew_s=int(get("sasl.oauthbearer.clock.skew.seconds")))
    except ValueError as e:
        raise ConfigError(f"listener {name}: {e}") from None
    except OSError as e:
        raise ConfigError(f"listener {name}: cannot read the JWKS {url}: "
                          f"{e.strerror or e}") from None


def _jaas_options(settings: ListenerSettings, mechanism: str) -> dict[str, str]:
    text = settings.get("sasl.jaas.config", mechanism)
    if not text:
        return {}
    key = f"{settings.prefix}{mechanism.lower()}.sasl.jaas.config"
    try:
        return dict(single_module(text, key).options)
    except JaasError as e:
        raise ConfigError(str(e)) from None
