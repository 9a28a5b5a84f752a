"""strom.common."""
