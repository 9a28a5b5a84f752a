"""strom.cluster."""
