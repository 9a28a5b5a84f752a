"""A new partition costs a directory and partition.metadata; its files come with the first write."""

from strom.storage import index as index_mod
from strom.storage.checkpoints import PARTITION_METADATA, read_partition_metadata
from strom.storage.config import LogConfig


def test_never_written_partition_has_no_segment_files_and_reopens(h, tmp_path):
    d = tmp_path / "t-0"
    log = h.open_log(d)
    log.flush()
    log.close()
    assert sorted(p.name for p in d.iterdir()) == [PARTITION_METADATA]
    again = h.open_log(d, clean_shutdown=True)
    assert (again.log_start_offset, again.log_end_offset) == (0, 0)
    assert again.topic_id == h.TOPIC_ID
    again.append(bytearray(h.make_batch(3)), leader_epoch=0, now_ms=0)
    assert again.log_end_offset == 3
    again.close()
    third = h.open_log(d, clean_shutdown=True)
    assert third.log_end_offset == 3
    third.close()


def test_first_append_creates_the_log_file(h, tmp_path):
    d = tmp_path / "t-0"
    log = h.open_log(d)
    assert not list(d.glob("*.log"))
    log.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    assert [p.name for p in d.glob("*.log")] == ["00000000000000000000.log"]
    log.close()


def test_empty_partition_metadata_reads_as_no_topic_id(h, tmp_path):
    """What a crash right after creating a partition can leave behind."""
    d = tmp_path / "t-0"
    d.mkdir()
    (d / PARTITION_METADATA).write_bytes(b"")
    assert read_partition_metadata(d / PARTITION_METADATA) is None
    log = h.open_log(d)  # adopts the topic id it is given
    assert read_partition_metadata(d / PARTITION_METADATA) == h.TOPIC_ID
    log.close()


def test_flush_with_nothing_new_writes_no_index(h, tmp_path, monkeypatch):
    log = h.open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    log.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    log.flush()
    writes = []
    real = index_mod._write_tail
    monkeypatch.setattr(index_mod, "_write_tail", lambda *a: (writes.append(a[0]), real(*a)))
    log.flush()
    assert writes == []
    log.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    log.flush()
    assert writes  # a new entry reaches the file
    log.close()


def test_truncation_cuts_the_index_file_on_the_next_flush(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    for _ in range(4):
        log.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    log.flush()
    seg = log.segments[-1]
    before = seg.index_path.stat().st_size
    log.truncate_to(4)
    log.flush()
    assert 0 < seg.index_path.stat().st_size < before
    log.close()
