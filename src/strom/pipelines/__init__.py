"""Strom's reference Spark pipelines (run them with `strom pipeline run NAME`).

- :mod:`strom.pipelines.derived_feed`: streaming visit counts per organisation, with a
  dead-letter topic;
- :mod:`strom.pipelines.lake_load`: resumable batch load of a topic into date-partitioned
  Parquet;
- :mod:`strom.pipelines.clicks`: the synthetic clickstream they consume.
"""
