import pytest

from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.config.metrics import DEFAULT_METRICS_LISTENER, metrics_endpoint


def test_the_default_listens_on_loopback_only() -> None:
    assert DEFAULT_METRICS_LISTENER == "http://127.0.0.1:9404"
    assert BrokerConfig.load(None, {}).get("metrics.listener") == DEFAULT_METRICS_LISTENER
    assert metrics_endpoint(DEFAULT_METRICS_LISTENER) == ("127.0.0.1", 9404)


@pytest.mark.parametrize(("value", "expected"), [
    ("", None), ("  ", None), (None, None),
    ("http://0.0.0.0:9500", ("0.0.0.0", 9500)),
    ("http://[::1]:9404/metrics", ("::1", 9404)),
    ("http://localhost:0/", ("localhost", 0)),
])
def test_listeners(value, expected) -> None:
    assert metrics_endpoint(value) == expected


@pytest.mark.parametrize("value", ["9404", "https://127.0.0.1:9404", "http://127.0.0.1",
                                   "http://127.0.0.1:99999", "http://127.0.0.1:9404/other",
                                   "http://:9404"])
def test_bad_listeners_are_refused_by_name(value) -> None:
    with pytest.raises(ConfigError, match=r"metrics\.listener"):
        metrics_endpoint(value)
    with pytest.raises(ConfigError, match=r"metrics\.listener"):
        BrokerConfig.load(None, {"metrics.listener": value})
