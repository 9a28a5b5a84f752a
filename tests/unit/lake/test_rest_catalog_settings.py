"""iceberg.catalog.type=rest (issue 33): the lake writer gets pyiceberg's RestCatalog properties
(the uri required, no local default, every other iceberg.catalog.* passed through); a missing or
non-HTTP uri is one line of refusal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.lake.settings import CatalogConfigError, catalog_properties, local_catalog_paths


def _config(tmp_path: Path, **iceberg: str) -> BrokerConfig:
    return BrokerConfig.load(None, {"log.dirs": str(tmp_path),
                                    **{f"iceberg.catalog.{k}": v for k, v in iceberg.items()}})


def test_rest_properties_pass_through_and_make_no_local_paths(tmp_path: Path) -> None:
    props = catalog_properties(_config(tmp_path, type="rest", uri="https://cat.example/api",
                                       credential="id:secret", token="t0",
                                       **{"header.X-Iceberg-Access-Delegation": "none"}))
    assert props == {"type": "rest", "uri": "https://cat.example/api",
                     "credential": "id:secret", "token": "t0",
                     "header.X-Iceberg-Access-Delegation": "none"}
    assert local_catalog_paths(props) == []


def test_rest_warehouse_is_passed_only_when_set(tmp_path: Path) -> None:
    props = catalog_properties(_config(tmp_path, type="rest", uri="http://127.0.0.1:8181",
                                       warehouse="s3://bucket/lake"))
    assert props["warehouse"] == "s3://bucket/lake" and "schema_version" not in props


@pytest.mark.parametrize("uri, words", [
    ("", "iceberg.catalog.type=rest needs iceberg.catalog.uri, the REST catalog's URL"),
    ("sqlite:////tmp/catalog.db", "needs an http:// or https:// iceberg.catalog.uri"),
])
def test_a_rest_catalog_needs_an_http_uri(tmp_path: Path, uri: str, words: str) -> None:
    with pytest.raises(CatalogConfigError, match=re.escape(words)) as caught:
        catalog_properties(_config(tmp_path, type="rest", uri=uri))
    assert "\n" not in str(caught.value)


def test_an_unknown_catalog_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("iceberg.catalog.type")):
        _config(tmp_path, type="glue")
