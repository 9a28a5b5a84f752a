"""A local SparkSession set up for Strom's pipelines, tools and tests.

Two settings matter beyond taste: Python workers must run this interpreter (PySpark's default
is whatever ``python3`` is first on PATH, which may not have Strom installed: the ``strom``
format would then be unknown), and the session time zone is UTC so that daily windows and
``date=`` partitions do not depend on the machine's zone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def local_session(app_name: str = "strom", master: str = "local[2]",
                  conf: Mapping[str, str] | None = None, *, ui: bool = False,
                  log_level: str = "WARN") -> Any:
    """Get or create a SparkSession with Strom's format available."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(BASE_CONF)
    settings["spark.ui.enabled"] = "true" if ui else "false"
    settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
