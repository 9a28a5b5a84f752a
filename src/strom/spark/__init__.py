"""Strom's Spark connector: the ``strom`` format, Spark's Kafka source and sink in Python.

The format registers itself (see ``pyspark_strom``); :func:`register` is only needed where
auto-registration is not available (e.g. a session started before the package was installed).
Importing this package does not import PySpark.
"""

from __future__ import annotations

from typing import Any

FORMAT = "strom"


def register(spark: Any) -> None:
    """Register the ``strom`` format on ``spark`` explicitly."""
    from strom.spark.source import StromDataSource

    spark.dataSource.register(StromDataSource)


__all__ = ["FORMAT", "register"]
