"""The one C extension: the Spark source's native reader decodes fetched record batches into
Arrow buffers without a Python object per record (strom.record.columns). It is optional: on a
machine without a C compiler the install goes on without it, and the Spark source reads through
confluent-kafka instead (docs/spark.md). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("strom.record._columns", ["src/strom/record/_columns.c"],
                             extra_compile_args=["-O2"], optional=True)])
