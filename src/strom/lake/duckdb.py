"""Reading Strom's Iceberg tables with DuckDB (issue 33 point 3): the tables the lake writer and
the Spark lake load write are plain Iceberg tables, so DuckDB's `iceberg_scan` reads them from
their current metadata file (pyiceberg's `table.metadata_location`), with no catalog.

DuckDB fetches its extensions from its own server on first use (`INSTALL`, or automatically on
a query that needs one). Strom never lets it: `connect` turns DuckDB's automatic install and
load off and LOADs the iceberg extension (and avro, which it needs for Iceberg's manifests;
parquet is built into DuckDB's Python package) from the files of the PyPI packages
`duckdb-extension-iceberg` and `duckdb-extension-avro`, pinned to the same version as `duckdb`
(`pip install 'strom[iceberg]'`; `make test` installs them). Each package holds its extension
at `<package>/extensions/v<duckdb version>/<name>.duckdb_extension`: a DuckDB of another
version finds no file there, and `connect` says so instead of reaching for the network.

duckdb is imported in the functions only: Strom runs without it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

# In load order: iceberg's own initialisation loads avro, and would try to install it if it
# were not loaded already.
EXTENSIONS = ("avro", "iceberg")
INSTALL_HINT = ("pip install 'strom[iceberg]' (duckdb, duckdb-extension-avro and "
                "duckdb-extension-iceberg, all of one version)")


class DuckDBUnavailable(RuntimeError):
    """duckdb or one of its extension packages is not installed, or not of duckdb's version."""


def extension_path(name: str) -> Path:
    """The `.duckdb_extension` file of the installed `duckdb-extension-<name>` package for the
    installed duckdb's version."""
    version = _duckdb().__version__
    package = f"duckdb_extension_{name}"
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise DuckDBUnavailable(f"DuckDB's {name} extension is not installed (the PyPI package "
                                f"duckdb-extension-{name}): {INSTALL_HINT}") from None
    path = Path(str(root / "extensions" / f"v{version}" / f"{name}.duckdb_extension"))
    if not path.is_file():
        try:
            have = importlib.metadata.version(f"duckdb-extension-{name}")
        except importlib.metadata.PackageNotFoundError:
            have = "unknown"
        raise DuckDBUnavailable(f"duckdb-extension-{name} {have} has no extension for duckdb "
                                f"{version} (no {path}): {INSTALL_HINT}")
    return path


def connect(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that reads Iceberg tables and downloads nothing: automatic install
    and load of DuckDB's known extensions are off, and iceberg (with avro) is loaded from its
    wheel. Times come back in UTC, as pyiceberg gives them."""
    paths = [extension_path(name) for name in EXTENSIONS]
    connection = _duckdb().connect(database, config={"autoinstall_known_extensions": False,
                                                     "autoload_known_extensions": False})
    try:
        for path in paths:
            connection.execute(f"LOAD {_literal(str(path))}")
        connection.execute("SET TimeZone = 'UTC'")  # icu's setting, built in
    except BaseException:
        connection.close()
        raise
    return connection


def scan(connection: duckdb.DuckDBPyConnection, metadata_location: str,
         columns: tuple[str, ...] = ()) -> Any:
    """The table whose current metadata file is `metadata_location` (a path or a file:// URI),
    as a pyarrow Table: every column, or the named ones."""
    selected = ", ".join(_identifier(c) for c in columns) if columns else "*"
    query = f"SELECT {selected} FROM iceberg_scan(?)"
    return connection.execute(query, [metadata_location]).to_arrow_table()


def _duckdb() -> Any:
    try:
        import duckdb
    except ModuleNotFoundError:
        raise DuckDBUnavailable(f"duckdb is not installed: {INSTALL_HINT}") from None
    return duckdb


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
