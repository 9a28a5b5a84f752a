"""sasl.jaas.config values as Kafka writes them."""

from __future__ import annotations

import pytest

from strom.security.jaas import JaasError, LoginModule, parse_jaas_config, single_module

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_plain_login_module_with_users() -> None:
    text = (f'{PLAIN} required username="admin" password="admin-secret" '
            f'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob secret";')
    assert parse_jaas_config(text) == [LoginModule(PLAIN, "required", {
        "username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
        "user_alice": "alice-secret", "user_bob": "bob secret"})]


def test_line_breaks_and_unquoted_values() -> None:
    text = f"{PLAIN} required\n  user_alice=alice-secret\n  user_bob='bob-secret' ;\n"
    module = single_module(text, "sasl.jaas.config")
    assert module.options == {"user_alice": "alice-secret", "user_bob": "bob-secret"}


def test_escaped_quotes_and_backslashes_in_quoted_values() -> None:
    text = rf'{PLAIN} required user_alice="say \"hi\"" user_bob="back\\slash" x="semi;colon=";'
    options = single_module(text, "sasl.jaas.config").options
    assert options == {"user_alice": 'say "hi"', "user_bob": "back\\slash",
                       "x": "semi;colon="}


@pytest.mark.parametrize("flag", ["required", "REQUIRED", "Requisite", "sufficient", "OPTIONAL"])
def test_flags_are_case_insensitive(flag: str) -> None:
    assert single_module(f"{PLAIN} {flag};", "c").flag == flag.lower()


def test_several_modules_in_order() -> None:
    modules = parse_jaas_config('a.B required x="1"; c.D optional;')
    assert [(m.class_name, m.flag, m.options) for m in modules] == [
        ("a.B", "required", {"x": "1"}), ("c.D", "optional", {})]


def test_a_missing_flag_is_named() -> None:
    with pytest.raises(JaasError, match=rf"login module {PLAIN} needs a control flag "
                                        r"\(required, requisite, sufficient, optional\)"):
        parse_jaas_config(f'{PLAIN} user_alice="alice-secret";')


def test_an_unknown_flag_is_refused() -> None:
    with pytest.raises(JaasError, match="needs a control flag"):
        parse_jaas_config(f"{PLAIN} mandatory;")


def test_a_missing_semicolon_is_named() -> None:
    with pytest.raises(JaasError, match=f"login module {PLAIN} is not terminated by ';'"):
        parse_jaas_config(f'{PLAIN} required user_alice="alice-secret"')


@pytest.mark.parametrize("text", [f"{PLAIN} required user_alice=;",
                                  f"{PLAIN} required user_alice;",
                                  f'{PLAIN} required ="x";'])
def test_an_option_without_key_or_value_is_refused(text: str) -> None:
    with pytest.raises(JaasError, match="expected key=value"):
        parse_jaas_config(text)


def test_an_unterminated_quote_is_refused() -> None:
    with pytest.raises(JaasError, match="unexpected character"):
        parse_jaas_config(f'{PLAIN} required user_alice="alice-secret;')


def test_single_module_refuses_two_modules() -> None:
    with pytest.raises(JaasError, match=r"^listener\.name\.x\.plain\.sasl\.jaas\.config must contain "
                                        r"exactly one login module, found 2$"):
        single_module(f"{PLAIN} required; {PLAIN} optional;",
                      "listener.name.x.plain.sasl.jaas.config")


def test_single_module_refuses_an_empty_value() -> None:
    with pytest.raises(JaasError, match="exactly one login module, found 0"):
        single_module("  ", "sasl.jaas.config")


def test_single_module_prefixes_parse_errors_with_the_config_name() -> None:
    with pytest.raises(JaasError, match=r"^sasl\.jaas\.config: login module .* is not "
                                        "terminated by ';'$"):
        single_module(f"{PLAIN} required", "sasl.jaas.config")


def test_jaas_error_is_a_value_error() -> None:
    assert issubclass(JaasError, ValueError)
