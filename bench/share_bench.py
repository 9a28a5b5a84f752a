"""``python -m bench.share_bench``: the share-group scenario alone, Strom against Apache Kafka 4.4.

The same as ``python -m bench --scenarios share-consume --peer kafka`` (bench/scenarios/share.py
says what it measures); any other ``python -m bench`` option may follow, e.g. ``--rounds 5``,
``--quick`` or ``--set share_records=100000``.
"""

from __future__ import annotations

import sys

from bench.run import main

if __name__ == "__main__":
    args = sys.argv[1:]
    defaults = ["--scenarios", "share-consume"]
    if not any(a.startswith("--peer") for a in args):
        defaults += ["--peer", "kafka"]
    sys.exit(main([*defaults, *args]))
