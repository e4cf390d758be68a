"""How fast ``haclient.selector`` compiles and evaluates a typical JMS message selector.

Run from the repository root::

    .venv/bin/python -m bench.selector                     # defaults: 200,000 evaluations
    .venv/bin/python -m bench.selector --evaluations 1000000 --repeat 5
    .venv/bin/python -m bench.selector --selector "color = 'blue' AND weight > 2500"

Two numbers, each the best of ``--repeat`` rounds (the least disturbed by other processes):

- compile: ``compile_selector`` calls per second on the selector text, each text made distinct
  (trailing spaces) so that the compile cache never answers;
- evaluate: ``Selector.matches`` calls per second over a fixed set of messages held as dicts,
  the lookup being ``dict.get`` (what a broker that keeps properties in a dict would pass).
  The messages mix matches and misses (about 8% match the typical selector) and absent
  properties; AND stops at the first false operand, so most evaluations are short.
- evaluate, all selected: the same over the messages that the selector selects, each of which
  goes through every operand: the worst case per message.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time

from haclient.selector import Selector, compile_selector

TYPICAL = (
    "JMSPriority > 4 AND region IN ('eu','us') AND price BETWEEN 10 AND 100 AND name LIKE 'a%'"
)


def messages(count: int, seed: int = 1) -> list[dict[str, object]]:
    """Messages with the typical selector's properties, random values, some absent."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for _ in range(count):
        props: dict[str, object] = {
            "JMSPriority": rng.randint(0, 9),
            "region": rng.choice(["eu", "us", "apac"]),
            "price": rng.choice([rng.randint(0, 200), rng.uniform(0, 200)]),
            "name": rng.choice(["alpha", "apple", "beta", "gamma"]),
        }
        if rng.random() < 0.1:
            del props[rng.choice(list(props))]
        out.append(props)
    return out


def bench_compile(text: str, count: int) -> float:
    """Seconds for ``count`` compilations of distinct spellings of ``text``."""
    texts = [text + " " * i for i in range(count)]
    start = time.perf_counter()
    for t in texts:
        compile_selector(t)
    return time.perf_counter() - start


def bench_evaluate(selector: Selector, batch: list[dict[str, object]], count: int) -> float:
    """Seconds for ``count`` calls of ``selector.matches``, cycling through ``batch``."""
    lookups = [props.get for props in batch]
    rounds, rest = divmod(count, len(lookups))
    matches = selector.matches
    start = time.perf_counter()
    for _ in range(rounds):
        for lookup in lookups:
            matches(lookup)
    for lookup in lookups[:rest]:
        matches(lookup)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selector", default=TYPICAL, help="the selector to measure")
    parser.add_argument("--evaluations", type=int, default=200_000, help="per round")
    parser.add_argument("--compilations", type=int, default=2_000, help="per round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best is reported")
    args = parser.parse_args(argv)

    selector = compile_selector(args.selector)
    batch = messages(1000)
    selected = sum(selector.matches(p.get) for p in batch)
    compile_s = min(bench_compile(args.selector, args.compilations) for _ in range(args.repeat))
    eval_s = min(bench_evaluate(selector, batch, args.evaluations) for _ in range(args.repeat))
    chosen = [p for p in batch if selector.matches(p.get)] or batch
    full_s = min(bench_evaluate(selector, chosen, args.evaluations) for _ in range(args.repeat))

    compile_rate = args.compilations / compile_s
    eval_rate = args.evaluations / eval_s
    full_rate = args.evaluations / full_s
    print(f"python {platform.python_version()} ({platform.python_implementation()})")
    print(f"selector: {args.selector}")
    print(f"messages selected: {selected} of {len(batch)}")
    print(f"compile:  {compile_rate:12,.0f} selectors/s  ({1e6 / compile_rate:8.2f} us each)")
    print(f"evaluate: {eval_rate:12,.0f} evaluations/s ({1e9 / eval_rate:8.0f} ns each)")
    print(
        f"evaluate, all selected: {full_rate:12,.0f} evaluations/s ({1e9 / full_rate:.0f} ns each)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
