"""The registry's errors, with Confluent Schema Registry's HTTP statuses, codes and messages.

Clients switch on `error_code` (confluent-kafka's client raises `SchemaRegistryError` with it),
so the codes and the wording follow Confluent's REST API reference.
"""

from __future__ import annotations


class RegistryError(Exception):
    """An error answered as ``{"error_code": code, "message": message}`` with `status`."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true "
                                     "to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                     "permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft deleted."
                                     "Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not deleted "
                                     "first before being permanently deleted")


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level "
                                     "compatibility configured")


def subject_mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode "
                                     "configured")


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema {detail}" if detail else "Invalid schema")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid version "
                                     "id. Allowed values are between [1, 2^31-1] and the string "
                                     "\"latest\"")


def invalid_compatibility(level: object) -> RegistryError:
    return RegistryError(422, 42203, f"Invalid compatibility level. Valid values are none, "
                                     f"backward, forward, full, backward_transitive, "
                                     f"forward_transitive, and full_transitive ({level!r})")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode. Valid values are READWRITE, READONLY, "
                                     f"READONLY_OVERRIDE and IMPORT ({mode!r})")


def operation_not_permitted(detail: str) -> RegistryError:
    return RegistryError(422, 42205, detail)


def reference_exists(detail: str) -> RegistryError:
    return RegistryError(422, 42206, detail)


def id_does_not_match(detail: str) -> RegistryError:
    return RegistryError(422, 42207, detail)


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, 42208, f"The specified subject '{subject}' is not valid.")


def schema_too_large(limit: int) -> RegistryError:
    return RegistryError(422, 42209, f"Schema is too large: the limit is {limit} bytes")


def incompatible(detail: str) -> RegistryError:
    return RegistryError(409, 409, detail)


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error while storing the schema: {detail}")


def store_timeout(detail: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out: {detail}")


def unknown_leader(detail: str) -> RegistryError:
    return RegistryError(500, 50004, detail)


def bad_request(detail: str) -> RegistryError:
    """A body that is not JSON or lacks what the call needs (Confluent: HTTP 400/422)."""
    return RegistryError(422, 422, detail)
