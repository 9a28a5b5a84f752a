"""Strom's side-by-side benchmark suite (Strom vs. the Tansu peer broker).

Run with ``python -m bench`` (``make bench``). ``make test`` checks its pure parts without a
broker: the report's arithmetic and composition, and the chart's data (tests/unit/bench).
"""
