"""strom.protocol."""
