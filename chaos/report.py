"""The report of a chaos run: a Markdown summary and an HTML page with PNG plots.

Plots (matplotlib, Agg backend, no display needed): messages consumed per second with the
faults marked, failover durations (the ``haclient_failover_duration_seconds`` histogram, as the
run scraped it from its ``haclient.metrics`` endpoint), and how long the calls that blocked took
(every call over 50 ms, from the ledger). The summary gives the failovers both ways: counted by
the metrics (buckets) and reported to the failover listener (F14, exact durations); the two
counts agree. ``write_report`` writes ``report.md``, ``report.html``, the plots, the final
scrape (``metrics.txt``) and ``ledger.jsonl`` into one directory.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from chaos.audit import PROMISES, AuditResult, Event
from chaos.scenarios.runner import MatrixRun
from chaos.scrape import DurationHistogram

FAILOVER_DURATIONS = "haclient_failover_duration_seconds"

__all__ = ["summary_markdown", "write_report"]


def _failovers(events: list[Event]) -> list[float]:
    return [e.duration for e in events if e.kind == "failover_completed"]


def _blocked(events: list[Event]) -> dict[str, list[float]]:
    calls: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.kind in ("call", "error") and event.duration > 0.05:
            calls[event.call].append(event.duration)
    return calls


def summary_markdown(run: MatrixRun, result: AuditResult) -> str:
    """The Markdown summary: verdict, counts, per-promise and per-workload tables."""
    events = run.ledger.snapshot()
    failovers = sorted(_failovers(events))
    faults = Counter(f.name for f in run.faults)
    lines = [
        "# haclient chaos run",
        "",
        f"**Verdict: {'every promise kept' if result.ok else 'PROMISES BROKEN'}** "
        f"(seed {run.seed}, {len(run.faults)} faults injected, "
        f"{run.ended - run.started:.0f} s, workloads: {', '.join(run.workloads)})",
        "",
        "| fault | injected |",
        "|---|---|",
        *(f"| {name} | {count} |" for name, count in sorted(faults.items())),
        "",
        "| workload stream mode | sent | accepted | consumed | duplicates | lost (allowed) | "
        "tx rolled back | tx in doubt |",
        "|---|---|---|---|---|---|---|---|",
    ]
    totals: dict[str, list[int]] = defaultdict(lambda: [0] * 7)
    for s in result.streams:
        name = s.stream.rsplit("-r", 1)[0]
        row = (
            s.sent,
            s.accepted,
            s.consumed,
            s.duplicates,
            s.lost_allowed,
            s.rolled_back,
            s.in_doubt,
        )
        if not s.mode and not any(row):
            continue  # a stream whose workload died before its first message (see the errors)
        totals[f"{name} {s.mode}"] = [
            a + b for a, b in zip(totals[f"{name} {s.mode}"], row, strict=True)
        ]
    lines += [f"| {k} | {' | '.join(map(str, v))} |" for k, v in sorted(totals.items())]
    lines += ["", "| promise | rule | broken |", "|---|---|---|"]
    lines += [f"| {p} | {PROMISES[p]} | {n} |" for p, n in result.by_promise().items()]
    if failovers:
        lines += [
            "",
            f"Failovers (listener): {len(failovers)}, median "
            f"{1000 * failovers[len(failovers) // 2]:.0f} ms, max {1000 * failovers[-1]:.0f} ms.",
        ]
    lines += _metrics_lines(run)
    if result.violations:
        lines += ["", "## Broken promises (first 50)", ""]
        lines += [
            f"- `{v.stream}` {v.promise} ({v.rule}): {v.detail}" for v in result.violations[:50]
        ]
    return "\n".join(lines) + "\n"


def _metrics_lines(run: MatrixRun) -> list[str]:
    """The failover figures of the run's metrics endpoint."""
    if run.metrics is None:
        return []
    durations = run.metrics.histogram(FAILOVER_DURATIONS)
    failed = run.metrics.total("haclient_failovers_total", outcome="failed")
    line = (
        f"Failovers (metrics endpoint): {durations.count} completed, {failed:g} failed, "
        f"{durations.total_seconds:.1f} s of downtime summed over the connections"
    )
    if durations.count:
        line += (
            f", median <= {_ms(durations.quantile_bound(0.5))}, "
            f"99th percentile <= {_ms(durations.quantile_bound(0.99))} (bucket bounds)"
        )
    return ["", line + "."]


def _ms(seconds: float) -> str:
    return "+Inf" if seconds == float("inf") else f"{1000 * seconds:g} ms"


def _plot_throughput(run: MatrixRun, events: list[Event], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(10, 3.5))
    t0 = run.started
    width = max(0.25, (run.ended - t0) / 300)  # seconds per bin: about 300 bins at most
    per_workload: dict[str, Counter[int]] = defaultdict(Counter)
    for event in events:
        if event.kind == "received":
            per_workload[event.stream.rsplit("-r", 1)[0]][int((event.t - t0) / width)] += 1
    bins = range(int((run.ended - t0) / width) + 1)
    for name, counts in sorted(per_workload.items()):
        rates = [counts.get(b, 0) / width for b in bins]
        ax.plot([b * width for b in bins], rates, label=name, linewidth=0.8)
    for fault in run.faults:
        end = max(fault.end, fault.start + 0.05)
        ax.axvspan(fault.start - t0, end - t0, color="red", alpha=0.15)
    ax.set_xlabel("seconds (faults shaded red)")
    ax.set_ylabel("messages received / s")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


@contextmanager
def _counts_figure(width: float, xlabel: str, path: Path) -> Iterator[Axes]:
    """Axes for a plot of counts (log scale), saved to ``path`` when the block ends; an empty
    plot says "none"."""
    fig, ax = plt.subplots(figsize=(width, 3.5))
    yield ax
    if ax.has_data():
        ax.set_yscale("log")  # the long tail is what matters
    else:
        ax.text(0.5, 0.5, "none", ha="center", va="center")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_histogram(values: dict[str, list[float]], xlabel: str, path: Path) -> None:
    data = {k: [1000 * v for v in vs] for k, vs in values.items() if vs}
    with _counts_figure(6, xlabel, path) as ax:
        if data:
            ax.hist(list(data.values()), bins=30, label=list(data), stacked=True)
            ax.legend(fontsize=7)


def _plot_buckets(histogram: DurationHistogram | None, xlabel: str, path: Path) -> None:
    """A histogram as Prometheus keeps it: one bar per bucket, labelled with its upper bound."""
    with _counts_figure(8, xlabel, path) as ax:
        if histogram is not None and histogram.count:
            counts = histogram.per_bucket()
            labels = [_ms(bound).removesuffix(" ms") for bound in histogram.bounds]
            ax.bar(range(len(counts)), counts)
            ax.set_xticks(range(len(counts)), labels, rotation=60, fontsize=7)


def write_report(run: MatrixRun, result: AuditResult, directory: Path) -> Path:
    """Write the report into ``directory`` (created); returns the HTML page's path."""
    directory.mkdir(parents=True, exist_ok=True)
    events = run.ledger.snapshot()
    run.ledger.save(directory / "ledger.jsonl")
    _plot_throughput(run, events, directory / "throughput.png")
    durations = None if run.metrics is None else run.metrics.histogram(FAILOVER_DURATIONS)
    _plot_buckets(
        durations,
        f"failover duration, bucket upper bound in ms ({FAILOVER_DURATIONS})",
        directory / "failovers.png",
    )
    if run.metrics is not None:
        (directory / "metrics.txt").write_text(run.metrics.text)
    _plot_histogram(_blocked(events), "blocked call duration (ms)", directory / "blocked.png")
    markdown = summary_markdown(run, result)
    (directory / "report.md").write_text(markdown)
    page = directory / "report.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>haclient chaos run</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "pre{white-space:pre-wrap}</style></head><body>"
        f"<pre>{html.escape(markdown)}</pre>"
        "<h2>Throughput, faults marked</h2><img src='throughput.png'>"
        "<h2>Failover durations (from the metrics endpoint)</h2><img src='failovers.png'>"
        "<h2>Blocked calls</h2><img src='blocked.png'>"
        "<p>The whole ledger: <a href='ledger.jsonl'>ledger.jsonl</a>; the final scrape of the "
        "metrics: <a href='metrics.txt'>metrics.txt</a></p></body></html>\n"
    )
    return page
