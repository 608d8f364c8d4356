"""``python -m statemachines.checking full|gate|session|generation [options]``: explore a world at its tested bounds
(or the one given), print the counts and, on a violation, its trace; exit 1 on a violation."""

from __future__ import annotations

from statemachines.checking.explorer import Composition
from statemachines.checking.full_world import BOUND, SMALL_BOUND, gate_session_generations
from statemachines.checking.gate_world import gate_with_generations
from statemachines.service_lifecycle import ServiceLifecycle
from statemachines.checking.generation_world import DEFAULT_BOUNDS, gate_with_generation_machines
from statemachines.checking.session_world import session_with_generations


def report(system: Composition, extras: str = "") -> bool:
    """Explore ``system`` and print its counts (and the trace of a violation); True when an invariant broke."""
    found = system.explore()
    print(
        f"{system.name}{extras}: {found.states} states, {found.transitions} transitions, depth {found.depth}, "
        f"{'complete' if found.complete else 'bounded'}, "
        f"{'no violation' if found.violation is None else 'VIOLATION'}"
    )
    if found.violation is not None:
        print(found.violation.format(system.describe))
    return found.violation is not None


def _systems(args) -> list[tuple[Composition, str]]:
    """The systems the command line asks for, each with the extras its line names."""
    if args.world == "gate":
        counts = range(1, (args.generations or 3) + 1)
        lifecycle = ServiceLifecycle if args.lifecycle else None
        return [(gate_with_generations(n, pauses=args.pauses, max_tokens=args.budget or 2, lifecycle=lifecycle), "")
                for n in counts]
    if args.world == "session":
        counts = range(1, (args.generations or 3) + 1)
        return [(session_with_generations(n, max_steps=args.max_steps), "") for n in counts]
    if args.world == "generation":
        if args.generations is None:
            bounds = [(n, args.budget or budget) for n, budget in DEFAULT_BOUNDS]
        else:
            bounds = [(args.generations, args.budget or 2)]
        return [(gate_with_generation_machines(n, budget=budget, pauses=args.pauses, partial_rollout=partial), "")
                for n, budget in bounds for partial in (True, False)]
    if args.generations is None:
        bounds = [BOUND, SMALL_BOUND]
    else:
        bounds = [{"n": args.generations, "budget": args.budget or BOUND["budget"], "pauses": args.pauses,
                   "same_weights_resumes": args.same_weights_resumes, "timeouts": args.timeouts}]
    systems = []
    for bound in bounds:
        extras = "".join(", " + name.replace("_", " ") for name in ("same_weights_resumes", "timeouts")
                         if bound.get(name))
        systems += [(gate_session_generations(**bound, partial_rollout=partial), extras) for partial in (True, False)]
    return systems


def main(argv: list[str] | None = None) -> int:
    """Explore the world named on the command line and print the counts (exit 1 on a violation)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m statemachines.checking", description=__doc__)
    parser.add_argument("world", choices=("full", "gate", "session", "generation"),
                        help="full: gate + session + chains + generations (the CI bounds); gate: the gate with "
                             "abstract generations (1..N); session: session + chains with abstract generations "
                             "(1..N); generation: the gate with real generations and an abstract session")
    parser.add_argument("--generations", type=int, default=None,
                        help="this many generations (gate, session: 1..N, default 3; full, generation: exactly N "
                             "instead of the tested bounds)")
    parser.add_argument("--budget", type=int, default=None,
                        help="tokens per generation (default 2; generation's third bound 1)")
    parser.add_argument("--pauses", type=int, default=2, help="pause/resume rounds (default 2)")
    parser.add_argument("--max-steps", type=int, default=None, help="session: the session's step limit")
    parser.add_argument("--same-weights-resumes", action="store_true", help="full: resumes may also keep the weights")
    parser.add_argument("--timeouts", action="store_true", help="full: pause waits may time out")
    parser.add_argument("--lifecycle", action="store_true",
                        help="gate: with the process's lifecycle (graceful shutdown: stop signals, grace, flush)")
    args = parser.parse_args(argv)
    failed = False
    for system, extras in _systems(args):
        failed = report(system, extras) or failed
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
