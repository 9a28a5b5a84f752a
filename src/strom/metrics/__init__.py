"""Metrics: cheap counters kept where things happen, exposed to Prometheus off the event loop."""
