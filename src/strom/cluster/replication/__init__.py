"""Partition replication: leaders track followers, followers fetch from leaders."""
