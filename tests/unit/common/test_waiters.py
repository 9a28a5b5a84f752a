import asyncio

import pytest

from strom.common.waiters import WaiterRegistry


def test_notify_wakes_a_waiter_on_any_of_its_keys() -> None:
    async def main() -> bool:
        registry = WaiterRegistry()
        waiter = asyncio.create_task(registry.wait_any([("t", 0), ("t", 1)], timeout=5))
        await asyncio.sleep(0)  # let the waiter register
        registry.notify(("t", 1))
        woken = await waiter
        assert len(registry) == 0
        return woken

    assert asyncio.run(main()) is True


def test_timeout_returns_false_and_cleans_up() -> None:
    async def main() -> None:
        registry = WaiterRegistry()
        assert await registry.wait_any(["k"], timeout=0.01) is False
        assert len(registry) == 0
        assert await registry.wait_any(["k"], timeout=0) is False

    asyncio.run(main())


@pytest.mark.timeout(10)
def test_notify_without_waiters_is_harmless() -> None:
    WaiterRegistry().notify("nobody")
