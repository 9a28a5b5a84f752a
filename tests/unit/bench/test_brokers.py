"""Readiness of a broker that logs no ready line: a listening port, then ApiVersions."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.brokers import api_versions_ok, listening


def test_listening_sees_a_bound_listener_only() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not listening(port)  # bound, not listening yet
        s.listen()
        assert listening(port)
        assert not api_versions_ok(port, timeout=0.2)  # accepted by the kernel, never answered
    assert not listening(port)
    assert not api_versions_ok(port, timeout=0.2)
