import asyncio

from strom.common.tasks import cancel_all, cancel_and_wait


async def _swallows_first_cancel(state: dict) -> None:
    """Like a loop around Python 3.11's wait_for when a cancel races its completion."""
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            state["cancels"] += 1
            if state["cancels"] >= 2:
                raise


def test_a_task_that_loses_a_cancellation_is_cancelled_again():
    async def main():
        state = {"cancels": 0}
        task = asyncio.create_task(_swallows_first_cancel(state))
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait(task), 5)
        return task, state

    task, state = asyncio.run(main())
    assert task.cancelled() and state["cancels"] == 2


def test_cancel_all_waits_for_every_task_and_keeps_failures_quiet():
    async def fails():
        raise ValueError("boom")

    async def main():
        failed = asyncio.create_task(fails())
        sleeper = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        await cancel_all([failed, sleeper])
        await cancel_and_wait(None)
        return failed, sleeper

    failed, sleeper = asyncio.run(main())
    assert failed.done() and isinstance(failed.exception(), ValueError)
    assert sleeper.cancelled()
