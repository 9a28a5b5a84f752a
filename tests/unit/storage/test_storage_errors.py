"""Storage errors: Kafka codes from the one ErrorCode enum, one CorruptRecordError hierarchy."""

import inspect

import pytest

from strom import record
from strom.protocol.errors import ErrorCode
from strom.storage import errors, producer_state, segment
from strom.storage.config import LogConfig
from strom.storage.validator import validate_append


def _storage_errors() -> list[type[errors.StorageError]]:
    found = []
    for module in (errors, producer_state, segment):
        found += [c for _, c in inspect.getmembers(module, inspect.isclass)
                  if issubclass(c, errors.StorageError)]
    return found


def test_every_storage_error_code_is_an_error_code_member():
    classes = _storage_errors()
    assert len(classes) >= 13
    for cls in classes:
        assert isinstance(cls.error_code, ErrorCode), cls
    assert not [name for name, value in vars(errors).items()
                if name.isupper() and isinstance(value, int)]  # no numbers of its own


def test_one_corrupt_record_error():
    for cls in (errors.CorruptRecordError, segment.CorruptSegmentError):
        assert issubclass(cls, record.CorruptRecordError)
        assert issubclass(cls, errors.StorageError)
        e = cls("bad batch")
        assert e.error_code == ErrorCode.CORRUPT_MESSAGE and e.message == "bad batch"
    assert errors.StorageError("x", ErrorCode.NOT_LEADER_OR_FOLLOWER).error_code == 6


def test_bad_batch_from_storage_is_caught_as_the_record_packages_error():
    batch = bytearray(record.build_batch([record.Record(0, 1, b"k", b"v")]))
    batch[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(record.CorruptRecordError) as exc:
        validate_append(batch, next_offset=0, leader_epoch=0, now_ms=1000, config=LogConfig())
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
