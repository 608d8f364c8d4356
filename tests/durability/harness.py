"""One run of the workload against a supervised proxy process: never killed, killed at random, or at a crash point.

``await run(store_url, tokenizer, logs)``: the reference (never killed). ``kills=K, seed=S``: a killer task sends
SIGKILL K times, each once the workload completed a seeded number of HTTP exchanges plus a seeded few
milliseconds (so kills land inside requests, finalizes and drains, not between them only); the supervisor starts
the proxy again on the same store at once. ``crash_point="write.before:3"``: the first process dies by itself
there (``proxy/trajectory/stores/crash_points.py``), the next completes the run. :class:`Run` holds the outcome
and every death, so a test can check that the kills it planned did happen.
"""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import trio

from tests.durability.proxy_process import Death, ProxyProcess
from tests.durability.workload import PLANS, Outcome, Plan, Progress, run_workload

#: seconds one run may take before the test fails (2 busy cores; a run takes well under a minute)
RUN_BOUND = 300.0
#: HTTP exchanges of one run of :data:`PLANS` (agents' requests, finalizes, reads and acks), about
EXCHANGES = 110
#: proxy flags of every run: a short read lease, so a read whose answer a crash lost is given back soon
FLAGS = ("--read-lease-seconds", "2")


@attrs.frozen
class Run:
    outcome: Outcome
    deaths: tuple[Death, ...]
    exchanges: int
    retries: int
    #: answers replayed for an Idempotency-Key (``Progress.replayed``)
    replayed: int
    logs: str


async def run(
    store: str, tokenizer_path: Path, logs: Path, *, kills: int = 0, seed: int = 0, crash_point: str | None = None,
    workload: tuple[Plan, ...] = PLANS,
) -> Run:
    logs.mkdir(parents=True, exist_ok=True)
    proxy = ProxyProcess(store=store, tokenizer_path=tokenizer_path, logs=logs, flags=FLAGS, crash_point=crash_point)
    progress = Progress()
    with trio.fail_after(RUN_BOUND):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.supervise)
            done = trio.Event()
            if kills:
                nursery.start_soon(_kill_randomly, proxy, progress, done, kills, seed)
            try:
                outcome = await run_workload(proxy, progress, workload=workload, on_done=done.set)
            except BaseException as exc:
                exc.add_note(f"proxy logs:\n{proxy.log_text()}")
                raise
            nursery.cancel_scope.cancel()
    return Run(outcome, tuple(proxy.deaths), progress.exchanges, progress.retries, progress.replayed,
               proxy.log_text())


async def _kill_randomly(proxy: ProxyProcess, progress: Progress, done: trio.Event, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    # Kill points spread over the run (the last one early enough to land before the drains end).
    targets = sorted(rng.sample(range(3, EXCHANGES - 8), kills))
    for target in targets:
        await progress.reach(target)
        await trio.sleep(rng.uniform(0.0, 0.03))
        if done.is_set():
            return
        # The next kill only once the restarted proxy is up (a kill during start-up is not a restart on the store).
        await proxy.current()
        await proxy.kill_and_restart()


__all__ = ["Run", "run"]
