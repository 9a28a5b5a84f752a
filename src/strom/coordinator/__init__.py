"""Coordinators: state machines that persist through internal topics (`__consumer_offsets`).

They are driven by the broker's handlers and never import the broker: partition logs, metadata
and the clock come in through small protocols (see `group/store.py`, `group/shards.py`).
"""
