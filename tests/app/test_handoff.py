"""app/handoff.py: a worker thread's items reach the loop in order, none lost, with fewer
wake-ups than items when the loop is busy."""

from __future__ import annotations

import asyncio
import threading
import time

from app.handoff import Handoff


def test_items_put_while_the_loop_is_busy_share_one_wakeup() -> None:
    async def main() -> tuple[list[int], int]:
        handoff: Handoff[int] = Handoff(asyncio.get_running_loop())
        thread = threading.Thread(target=lambda: [handoff.put(i) for i in range(100)])
        thread.start()
        thread.join()  # the loop is held here: every put lands before it looks
        got = [await handoff.get() for _ in range(100)]
        return got, handoff.wakeups

    got, wakeups = asyncio.run(main())
    assert got == list(range(100))
    assert wakeups == 1


def test_a_get_waiting_on_an_empty_handoff_is_woken_by_each_later_put() -> None:
    async def main() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        handoff: Handoff[int] = Handoff(loop)

        def slowly() -> None:
            for i in range(5):
                time.sleep(0.01)
                handoff.put(i)

        thread = threading.Thread(target=slowly)
        thread.start()
        got = [await asyncio.wait_for(handoff.get(), 5) for _ in range(5)]
        thread.join()
        return got, handoff.wakeups

    got, wakeups = asyncio.run(main())
    assert got == list(range(5))
    assert wakeups == 5  # the loop found it empty between puts: each put woke it


def test_nothing_is_lost_or_reordered_when_threads_race_the_loop() -> None:
    count, threads = 20_000, 4

    async def main() -> list[tuple[int, int]]:
        handoff: Handoff[tuple[int, int]] = Handoff(asyncio.get_running_loop())
        workers = [threading.Thread(target=lambda t=t: [handoff.put((t, i))
                                                        for i in range(count)])
                   for t in range(threads)]
        for worker in workers:
            worker.start()
        got = [await asyncio.wait_for(handoff.get(), 10) for _ in range(count * threads)]
        for worker in workers:
            worker.join()
        return got

    got = asyncio.run(main())
    for t in range(threads):
        assert [i for who, i in got if who == t] == list(range(count))
