"""strom.broker."""
