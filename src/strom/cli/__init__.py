"""strom.cli."""
