"""KafkaPrincipal and ssl.principal.mapping.rules (Kafka's SslPrincipalMapper grammar)."""

from __future__ import annotations

import pytest

from strom.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
)

DN = "CN=kafka-client,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"


def test_principal_text_and_parse_round_trip() -> None:
    alice = KafkaPrincipal.user("alice")
    assert str(alice) == "User:alice"
    assert KafkaPrincipal.parse("User:alice") == alice
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    # only the first ':' separates the type: the name may hold more
    assert KafkaPrincipal.parse("User:CN=a:b") == KafkaPrincipal("User", "CN=a:b")


@pytest.mark.parametrize("text", ["alice", "User:", ":alice", ""])
def test_parse_refuses_text_that_is_not_type_colon_name(text: str) -> None:
    with pytest.raises(ValueError, match="Type:name"):
        KafkaPrincipal.parse(text)


@pytest.mark.parametrize("rules", ["DEFAULT", "", "  "])
def test_default_keeps_the_distinguished_name(rules: str) -> None:
    assert SslPrincipalMapper(rules).principal_name(DN) == DN


def test_a_rule_extracts_a_group() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    assert mapper.principal_name(DN) == "kafka-client"


def test_lower_and_upper_case_suffixes() -> None:
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L").principal_name(
        DN) == "kafka-client@serviceusers"
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U").principal_name(
        DN) == "KAFKA-CLIENT@SERVICEUSERS"


def test_kafka_mapper_examples_first_matching_rule_wins() -> None:
    # Kafka's SslPrincipalMapperTest.testSslPrincipalMapper
    mapper = SslPrincipalMapper(",".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.principal_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.principal_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.principal_name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.principal_name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.principal_name("OU=JavaSoft,O=Sun Microsystems,C=US") == (
        "OU=JavaSoft,O=Sun Microsystems,C=US")


def test_order_of_rules_decides() -> None:
    first = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/first-$1/, RULE:^CN=([^,]*),.*$/second-$1/")
    assert first.principal_name(DN) == "first-kafka-client"
    default_first = SslPrincipalMapper("DEFAULT,RULE:^CN=([^,]*),.*$/$1/")
    assert default_first.principal_name(DN) == DN


def test_the_pattern_must_match_the_whole_name() -> None:
    # 'CN=kafka-client' is only a prefix of the name: no match, so DEFAULT applies
    mapper = SslPrincipalMapper("RULE:CN=([^,]*)/$1/,DEFAULT")
    assert mapper.principal_name(DN) == DN
    assert mapper.principal_name("CN=solo") == "solo"


def test_commas_inside_a_pattern_do_not_split_rules() -> None:
    # Kafka's testCommaWithWhiteSpace: an escaped comma in the name, commas in the pattern
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert len(mapper.rules) == 2
    assert mapper.principal_name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"
    splitting = SslPrincipalMapper("RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/")
    assert splitting.principal_name("CN=someone,DC=example") == "someone"


def test_escaped_dollar_and_backslash_in_the_replacement() -> None:
    assert SslPrincipalMapper(r"RULE:^CN=([^,]*).*$/\$$1/").principal_name(DN) == (
        "$kafka-client")
    assert SslPrincipalMapper(r"RULE:^CN=([^,]*).*$/a\\b/").principal_name(DN) == "a\\b"


def test_no_matching_rule_raises() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=Admins.*$/$1/")
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=kafka-client"):
        mapper.principal_name(DN)
    assert issubclass(NoMatchingRule, ValueError)


@pytest.mark.parametrize("rules", [
    # Kafka's SslPrincipalMapperTest.testInvalidRules
    "default",
    "DEFAUL",
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "DEFAULT,garbage",
])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match=r"^Invalid rule: "):
        SslPrincipalMapper(rules)


def test_the_invalid_rule_is_named_in_the_message() -> None:
    with pytest.raises(ValueError) as info:
        SslPrincipalMapper("DEFAULT, RULE:^CN=x$/y")
    assert str(info.value).startswith("Invalid rule: ")
    assert "RULE:^CN=x$/y" in str(info.value)


def test_a_rule_with_an_invalid_regex_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper("RULE:^CN=(unclosed$/$1/")
