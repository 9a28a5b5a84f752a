from strom.cli.reassign import throttled_replicas


def test_current_replicas_send_throttled_and_added_ones_fetch_throttled() -> None:
    current = {("a", 0): [1, 2], ("a", 1): [2, 3], ("b", 0): [1]}
    moves = {("a", 0): [1, 3], ("a", 1): [2, 3], ("b", 0): [2, 3]}
    assert throttled_replicas(current, moves) == {
        "a": ("0:1,0:2,1:2,1:3", "0:3"),
        "b": ("0:1", "0:2,0:3"),
    }
