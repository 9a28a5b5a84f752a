"""The one C extension: the Spark source decodes fetched record batches into Arrow buffers
without a Python object per record (strom.record.columns). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("strom.record._columns", ["src/strom/record/_columns.c"],
                             extra_compile_args=["-O2"])])
