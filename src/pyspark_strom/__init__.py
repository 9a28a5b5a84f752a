"""Auto-registration of the ``strom`` Spark format.

PySpark imports every top-level module named ``pyspark_*`` on the first data-source lookup and
registers its ``DefaultSource``; installing Strom is therefore enough for
``spark.read.format("strom")`` and ``spark.readStream.format("strom")`` to work.
"""

from strom.spark.source import StromDataSource as DefaultSource

__all__ = ["DefaultSource"]
