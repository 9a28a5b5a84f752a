"""The broker's metrics: counted on the event loop (`stats`), gathered in slices on the loop
when Prometheus scrapes (`snapshot`), and turned into Kafka's metric names off the loop
(`families`, `collector`)."""
