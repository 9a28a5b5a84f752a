"""Strom's HTTP serving layer, written once for every HTTP listener (the web console, the schema
registry): uvicorn hardened against slow and hostile clients (`server`)."""
