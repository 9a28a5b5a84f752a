"""The coordinator runtime: what the group, transaction and share coordinators share.

Each coordinator keeps its state in an internal topic and serves the partitions of that topic
this broker leads. The runtime gives them, written once:

- `store.StateStore`: appends to a state partition (refused before anything is written while
  the partition's ISR is below min.insync.replicas, as an acks=all append) and replays it,
  transaction markers included;
- `loader.ShardLoader`: builds a shard from its log when leadership arrives, drops it when
  leadership leaves;
- `timers.Timers`: keyed one-shot timers on the event loop;
- `commits.Commits`: the one place where a coordinator's answers wait until the high
  watermark passes what they wrote (or read), with one error map (`errors`).
"""
