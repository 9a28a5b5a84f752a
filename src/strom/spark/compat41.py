"""Stand-ins for PySpark >= 4.2's admission-control classes (pyspark.sql.streaming.datasource).

PySpark 4.1 (the newest Spark Iceberg's runtime supports) has none of them: its stream readers
get ``latestOffset()`` with no arguments and no read limit, and no Trigger.AvailableNow hook.
The ``strom`` source imports these only when the real ones are missing, so the same code runs
on 4.1 and on 4.3.
"""

from __future__ import annotations


class ReadLimit:
    """Base of the read limits (never passed by PySpark 4.1)."""


class ReadAllAvailable(ReadLimit):
    """No limit: read everything available."""


class ReadMaxRows(ReadLimit):
    """At most ``max_rows`` records per micro-batch."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows


class SupportsTriggerAvailableNow:
    """Mix-in; PySpark 4.1 never calls the hook."""

    def prepareForTriggerAvailableNow(self) -> None:
        pass
