"""Strom's side-by-side benchmark suite (Strom vs. the Tansu peer broker).

Run with ``python -m bench`` (``make bench``). Nothing in here is imported by ``make test``
except the pure report logic, which has a unit test.
"""
