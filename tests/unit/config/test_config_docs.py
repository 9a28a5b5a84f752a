"""docs/configuration.md is what tools/gen_config_docs.py makes of the config registry: each
config's name, default and status (acted on, warned about, refused) cannot drift from the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "tools" / "gen_config_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_md_is_generated_from_the_registry() -> None:
    gen = _generator()
    assert (ROOT / "docs" / "configuration.md").read_text() == gen.render(), (
        "docs/configuration.md is out of date: run python tools/gen_config_docs.py")


def test_each_broker_config_has_its_status() -> None:
    gen = _generator()
    from strom.config.broker import BROKER_CONFIGS
    from strom.config.checks import REFUSED_NAMES

    assert gen.status("log.dirs", BROKER_CONFIGS["log.dirs"].implemented) == "yes"
    unimplemented = next(iter(BROKER_CONFIGS.unimplemented())).name
    assert gen.status(unimplemented, False) == "warned: no effect"
    refused = next(iter(REFUSED_NAMES))
    assert gen.status(refused, True).startswith("refused")
