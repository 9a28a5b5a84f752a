"""`strom users ...`: SCRAM users (kafka-configs.sh --entity-type users, SCRAM part).

The password is salted and hashed here, as Kafka's admin client does: only the salted
password travels to the broker (AlterUserScramCredentials), which keeps StoredKey and
ServerKey, never the password.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from strom.cli.common import (
    BootstrapOpt,
    ClientOptions,
    CliError,
    CommandConfigOpt,
    TimeoutOpt,
    UsageError,
    admin_kwargs,
    handle_errors,
    kafka_error_text,
    make_admin,
    out,
    print_table,
    result_of,
    wait_all,
)

app = typer.Typer(help="Add, list and delete SCRAM users.", no_args_is_help=True)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384

MechanismOpt = Annotated[
    list[str] | None,
    typer.Option("--mechanism", "-m",
                 help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; add: both by default)."),
]


def _mechanisms(given: list[str] | None, default: tuple[str, ...]) -> list[str]:
    chosen = [m.upper() for m in given] if given else list(default)
    for m in chosen:
        if m not in MECHANISMS:
            raise UsageError(f"unknown SCRAM mechanism {m!r} (choose from {', '.join(MECHANISMS)})")
    return list(dict.fromkeys(chosen))


def _scram_mechanism(name: str):
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism.SCRAM_SHA_256 if name == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512


def _apply(opts: ClientOptions, alterations: list) -> None:
    admin, _ = make_admin(opts)
    wait_all(admin.alter_user_scram_credentials(alterations, **admin_kwargs(opts)), opts)


@app.command("add")
@handle_errors
def add(
    user: Annotated[str, typer.Argument(help="User name.", show_default=False)],
    password: Annotated[str, typer.Option(
        "--password", prompt=True, hide_input=True, confirmation_prompt=True,
        envvar="STROM_USER_PASSWORD", help="The password (asked for when not given).")],
    mechanism: MechanismOpt = None,
    iterations: Annotated[int, typer.Option(
        "--iterations", help=f"SCRAM iterations ({MIN_ITERATIONS}-{MAX_ITERATIONS}).")] = 4096,
    bootstrap: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Add a SCRAM user, or change its password (one broker request per mechanism)."""
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    if not user:
        raise UsageError("the user name must not be empty")
    if not password:
        raise UsageError("the password must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UsageError(f"--iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    opts = ClientOptions(bootstrap, command_config, timeout)
    # Kafka refuses one user twice in a request, so each mechanism goes on its own
    for m in _mechanisms(mechanism, MECHANISMS):
        info = ScramCredentialInfo(_scram_mechanism(m), iterations)
        _apply(opts, [UserScramCredentialUpsertion(user, info, password.encode("utf-8"))])
        out.print(f"{m} credential of user {user} set ({iterations} iterations)")


@app.command("delete")
@handle_errors
def delete(
    user: Annotated[str, typer.Argument(help="User name.", show_default=False)],
    mechanism: MechanismOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Delete a user's SCRAM credentials (all of its mechanisms by default)."""
    from confluent_kafka.admin import UserScramCredentialDeletion

    opts = ClientOptions(bootstrap, command_config, timeout)
    mechanisms = _mechanisms(mechanism, ()) or [m for m, _ in _describe(opts, user)]
    if not mechanisms:
        raise CliError(f"user {user} has no SCRAM credentials")
    for m in mechanisms:
        _apply(opts, [UserScramCredentialDeletion(user, _scram_mechanism(m))])
        out.print(f"{m} credential of user {user} deleted")


def _describe(opts: ClientOptions, user: str | None) -> list[tuple[str, int]] | list:
    admin, _ = make_admin(opts)
    future = admin.describe_user_scram_credentials([user] if user else None,
                                                   **admin_kwargs(opts))
    if user is None:
        try:
            return result_of(future, opts)
        except CliError:
            raise
        except Exception as e:
            raise CliError(kafka_error_text(e)) from None
    try:
        described = result_of(future[user], opts)
    except CliError:
        raise
    except Exception as e:
        if "RESOURCE_NOT_FOUND" in kafka_error_text(e):
            return []
        raise CliError(kafka_error_text(e)) from None
    return [(_name(info.mechanism), info.iterations) for info in described.scram_credential_infos]


def _name(mechanism) -> str:
    return str(mechanism.name).replace("_", "-")


@app.command("list")
@handle_errors
def list_users(
    bootstrap: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """List the SCRAM users with their mechanisms and iteration counts."""
    opts = ClientOptions(bootstrap, command_config, timeout)
    described = _describe(opts, None)
    table = Table(box=None, pad_edge=False)
    for column in ("USER", "MECHANISM", "ITERATIONS"):
        table.add_column(column)
    for user in sorted(described):
        for info in described[user].scram_credential_infos:
            table.add_row(user, _name(info.mechanism), str(info.iterations))
    print_table(table)
