"""The report of a chaos run: a Markdown summary, the same rendered as an HTML page, and plots.

Every figure comes from the ledger (``Figures``, which the demo's terminal summary uses too, so
the two never disagree) and says what it counts. The metrics endpoint's scrape is only checked
against it: its failover count must equal the listeners' (F14). A traced run (``haclient-chaos
run --trace``) adds the trace ids of the messages a fault hit, to look up in a tracing backend.
Plots (matplotlib, Agg backend): messages received per second with the faults shaded, the
downtime of each failover in milliseconds, and how long the calls that blocked took (every call
over 50 ms).
``write_report`` writes ``report.md``, ``report.html`` (rendered by markdown-it-py: headings and
tables), the plots, the final scrape (``metrics.txt``) and ``ledger.jsonl`` into one directory.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from markdown_it import MarkdownIt

from chaos.audit import PROMISES, AuditResult, Event, StreamSummary, Violation
from chaos.bed import FaultRecord
from chaos.scenarios.runner import MatrixRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "FAULT_MEANINGS",
    "Figures",
    "figures",
    "hit_by_faults",
    "ms",
    "render_html",
    "summary_markdown",
    "write_report",
]

FAILOVERS = "haclient_failovers_total"
GAP_AFTER_FAULT = 1.0
"""Seconds after a fault's end during which a call still counts as hit by it (recovering)."""

FAULT_MEANINGS = {
    "kill": "the serving broker killed (no goodbye); the standby takes over",
    "stop": "the serving broker stopped (Close frames); the standby takes over",
    "pause": "the serving broker silent; clients notice by their idle timeout",
    "blackhole": "the proxies hold every byte the brokers send",
    "reset_peer": "connections reset (TCP RST)",
    "latency": "every byte from the brokers delayed",
    "bandwidth": "the brokers' output squeezed to a few KB/s",
    "slicer": "data both ways cut into slices of a few bytes",
    "limit_data": "each connection cut after a few hundred bytes, mid-frame",
    "flap": "every proxy down and up again a few times",
    "app_kill": "an application process (outbox producer, inbox consumer) SIGKILLed, restarted",
}
"""What each fault does, in a reader's words (the ledger's ``fault`` events give the details)."""


@dataclass(frozen=True)
class Figures:
    """The run's headline figures, each computed from the ledger.

    Failovers are those each connection's failover listener reported (F14), with the downtime
    it measured; transactions and acknowledges count the calls that raised or returned.
    """

    failovers: int
    downtime_median: float | None
    """Seconds; the median of every failover's downtime (the mean of the middle two when
    their number is even)."""
    downtime_max: float | None
    committed: int
    rolled_back: int
    """Transactions whose ``commit()`` raised ``TransactionRolledBackError``, nothing applied."""
    in_doubt: int
    """Transactions whose ``commit()`` raised in doubt: the broker may have applied them."""
    acknowledges_refused: int
    questions_answered: int
    questions_asked_again: int


def figures(events: list[Event]) -> Figures:
    """The headline figures of a ledger (see ``Figures``)."""
    downtimes = [e.duration for e in events if e.kind == "failover_completed"]
    transactions = [e for e in events if e.actor == "producer" and e.mode == "TRANSACTED"]
    kinds = Counter((e.kind, e.actor) for e in events)
    return Figures(
        failovers=len(downtimes),
        downtime_median=statistics.median(downtimes) if downtimes else None,
        downtime_max=max(downtimes, default=None),
        committed=sum(1 for e in transactions if e.kind == "committed"),
        rolled_back=sum(1 for e in transactions if e.kind == "rolled_back" and not e.in_doubt),
        in_doubt=sum(1 for e in transactions if e.kind == "rolled_back" and e.in_doubt),
        acknowledges_refused=kinds["ack_failed", "consumer"],
        questions_answered=kinds["reply", "requester"],
        questions_asked_again=kinds["sent", "requester"] - kinds["reply", "requester"],
    )


def ms(seconds: float | None) -> str:
    """``453 ms`` (``-`` for None)."""
    return "-" if seconds is None else f"{1000 * seconds:.0f} ms"


def _workload(stream: str) -> str:
    return stream.rsplit("-r", 1)[0]


def _failovers(events: list[Event]) -> list[float]:
    return [e.duration for e in events if e.kind == "failover_completed"]


def _blocked(events: list[Event]) -> dict[str, list[float]]:
    calls: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.kind in ("call", "error") and event.duration > 0.05:
            calls[event.call].append(event.duration)
    return calls


STREAM_COLUMNS = (
    ("sent", "messages the producer (or requester) sent"),
    ("accepted or committed", "sends the broker accepted, or that a commit covered"),
    ("consumed", "distinct messages consumed (received, acknowledged or committed by mode)"),
    ("duplicates", "messages consumed more than once, or left on the queue as well"),
    ("left on the queue", "messages the drain found on the queue at the end of the run"),
    ("lost (allowed)", "NO_ACK only: accepted, never received (A5)"),
    ("tx rolled back", "producer commits that raised: nothing applied"),
    ("tx in doubt", "producer commits that raised in doubt: perhaps applied"),
)


def _stream_rows(streams: list[StreamSummary]) -> list[str]:
    """One row per workload and consumer mode, summed over its rounds."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0] * len(STREAM_COLUMNS))
    for s in streams:
        row = [s.sent, s.accepted, s.consumed, s.duplicates, s.left, s.lost_allowed]
        row += [s.rolled_back, s.in_doubt]
        if not s.mode and not any(row):
            continue  # a stream whose workload died before its first message (see the errors)
        key = f"{_workload(s.stream)} ({s.mode})"
        totals[key] = [a + b for a, b in zip(totals[key], row, strict=True)]
    header = "| workload (consumer mode) | " + " | ".join(c for c, _ in STREAM_COLUMNS) + " |"
    lines = [header, "|---" + "|---:" * len(STREAM_COLUMNS) + "|"]  # numbers to the right
    lines += [f"| {k} | {' | '.join(map(str, v))} |" for k, v in sorted(totals.items())]
    lines += ["", *(f"- *{column}*: {meaning}" for column, meaning in STREAM_COLUMNS)]
    return lines


PROMISE_NAMES: dict[str, str] = {
    "lost": "no accepted message is lost",
    "duplicate": "no message is consumed twice",
    "phantom": "no message arrives that nobody sent",
    "rolled_back_seen": "a transaction reported rolled back sends nothing",
    "in_doubt_partial": "a transaction in doubt is applied whole or not at all",
    "ack_after_failover": "an acknowledge across a failover is refused",
    "old_broker": "no message from the old broker after a failover",
    "blocked": "no call outlasts its deadline",
    "unexpected_error": "no call raises what its rule does not allow",
    "unanswered": "every request is answered",
    "hung": "every workload finishes",
    "lost_effect": "every committed change takes effect (outbox, inbox)",
    "duplicated_effect": "no effect is applied twice (inbox)",
}
"""Each promise of the audit (``chaos.audit.PROMISES``), as the report's reader says it."""

PROMISE_WORKLOADS: dict[str, frozenset[str]] = {
    "rolled_back_seen": frozenset({"transacted", "tx_to_client"}),
    "in_doubt_partial": frozenset({"transacted", "tx_to_client"}),
    "ack_after_failover": frozenset({"client", "individual", "tx_to_client"}),
    "unanswered": frozenset({"request_reply"}),
    "lost_effect": frozenset({"outbox_inbox"}),
    "duplicated_effect": frozenset({"outbox_inbox"}),
}
"""The workloads that can break a promise, where not every workload can: a run without any
of them has no row for it (a row of 0 would claim a check that never ran)."""


def _promise_rows(run: MatrixRun, result: AuditResult) -> list[str]:
    ran = set(run.workloads)
    return [
        f"| {PROMISE_NAMES.get(p, p)} | {PROMISES[p]} | {n} |"
        for p, n in result.by_promise().items()
        if n or p not in PROMISE_WORKLOADS or PROMISE_WORKLOADS[p] & ran
    ]


def summary_markdown(run: MatrixRun, result: AuditResult) -> str:
    """The Markdown summary: verdict, faults, streams, failovers, transactions, promises."""
    events = run.ledger.snapshot()
    faults = Counter(f.name for f in run.faults)
    lines = [
        "# haclient chaos run",
        "",
        f"**Verdict: {'every promise kept' if result.ok else 'PROMISES BROKEN'}** "
        f"(run {run.run_id or '-'}, seed {run.seed}, {len(run.faults)} faults injected, "
        f"{run.ended - run.started:.0f} s, workloads: {', '.join(run.workloads)})",
        "",
        "## Faults",
        "",
        "| fault | what it does | injected |",
        "|---|---|---:|",
        *(f"| {n} | {FAULT_MEANINGS.get(n, '')} | {c} |" for n, c in sorted(faults.items())),
        "",
        "## Streams",
        "",
        *_stream_rows(result.streams),
        *_drain_lines(run),
        *_figure_lines(run, figures(events)),
        *_trace_lines(run, events),
        "",
        "## Promises",
        "",
        "| promise | rules (docs/semantics.md) | broken |",
        "|---|---|---:|",
        *_promise_rows(run, result),
    ]
    lines += _violation_lines(result)
    return "\n".join(lines) + "\n"


_VARYING = re.compile(r"ID:\S+|\b[0-9a-f]{8,}\b|\d+(?:\.\d+)?")
"""What differs between repeats of one violation: message ids, hex ids, numbers."""


def _violation_lines(result: AuditResult) -> list[str]:
    """The broken promises, repeats of one (same stream, promise and text but for ids and
    numbers) summarised as one line with their count and the first one's text, most
    frequent first (the first 50)."""
    if not result.violations:
        return []
    groups: dict[tuple[str, str, str], list[Violation]] = defaultdict(list)
    for violation in result.violations:
        gist = _VARYING.sub("#", violation.detail)
        groups[(violation.stream, violation.promise, gist)].append(violation)
    ranked = sorted(groups.values(), key=len, reverse=True)
    lines = ["", f"## Broken promises ({len(result.violations)}, {len(groups)} kinds)", ""]
    for same in ranked[:50]:
        first = same[0]
        times = f" ({len(same)} times; the first:)" if len(same) > 1 else ""
        promise = PROMISE_NAMES.get(first.promise, first.promise)
        lines.append(
            f"- `{first.stream}` {promise} ({first.rule}; `{first.promise}`){times} {first.detail}"
        )
    if len(ranked) > 50:
        lines.append(f"- ... and {len(ranked) - 50} more kinds")
    return lines


def _drain_lines(run: MatrixRun) -> list[str]:
    if not run.drain_error:
        return []
    return [
        "",
        f"**The drain at the end failed** ({run.drain_error}): messages left on the queues are "
        "not accounted for.",
    ]


def _figure_lines(run: MatrixRun, f: Figures) -> list[str]:
    lines = [
        "",
        "## Failovers",
        "",
        f"- Failovers the connections' listeners reported (ledger): {f.failovers}",
        f"- Downtime per failover, from its start to the gate opening again: median "
        f"{ms(f.downtime_median)}, max {ms(f.downtime_max)}",
    ]
    if run.metrics is not None:
        completed = run.metrics.total(FAILOVERS, outcome="completed")
        failed = run.metrics.total(FAILOVERS, outcome="failed")
        agree = "agrees with" if completed == f.failovers else "DISAGREES with"
        lines.append(
            f"- Counted by the metrics endpoint (`{FAILOVERS}`): {completed:g} completed "
            f"({agree} the listeners), {failed:g} failed"
        )
    ran = set(run.workloads)
    told = [
        (
            PROMISE_WORKLOADS["rolled_back_seen"],
            f"- Producer transactions: {f.committed} committed, {f.rolled_back} rolled back "
            f"(F7: commit() said so, nothing applied), {f.in_doubt} in doubt (F7: perhaps "
            "applied, all or nothing)",
        ),
        (
            PROMISE_WORKLOADS["ack_after_failover"],
            f"- Acknowledges refused after a failover: {f.acknowledges_refused} (F8: the "
            "consumer called recover() and got the messages again)",
        ),
        (
            PROMISE_WORKLOADS["unanswered"],
            f"- Questions answered: {f.questions_answered}; asked again: "
            f"{f.questions_asked_again} (F6: a reply to a temporary queue a failover replaced)",
        ),
    ]
    shown = [line for workloads, line in told if workloads & ran]  # none of 0 for no workload
    if not shown:
        return lines
    return [*lines, "", "## Transactions, acknowledges, requests", "", *shown]


TRACES_SHOWN = 50
"""Rows of the report's table of the traces of messages a fault hit."""


def hit_by_faults(run: MatrixRun, events: list[Event]) -> list[tuple[Event, FaultRecord]]:
    """The sends and receptions of a traced run whose call overlapped a fault (from its
    injection to its end, and the gap after it while the clients recover), in ledger order,
    each with the first fault it overlapped."""
    windows = [(f.start, (f.end or f.start) + GAP_AFTER_FAULT, f) for f in run.faults]
    hit = []
    for event in events:
        if event.kind not in ("sent", "received") or not event.trace:
            continue
        fault = next((f for s, e, f in windows if event.start <= e and event.t >= s), None)
        if fault is not None:
            hit.append((event, fault))
    return hit


def _trace_lines(run: MatrixRun, events: list[Event]) -> list[str]:
    """The table of trace ids of the messages a fault hit (a traced run only, rule O3): look
    each up in the tracing backend to see the failover in the message's trace."""
    hit = hit_by_faults(run, events)
    if not any(event.trace for event in events):
        return []
    lines = [
        "",
        "## Traces of the messages a fault hit",
        "",
        f"{len(hit)} sends and receptions overlapped a fault; their trace ids (first "
        f"{TRACES_SHOWN}), to look up in the tracing backend:",
        "",
        "| message | stream | event | fault | trace id |",
        "|---|---|---|---|---|",
    ]
    for event, fault in hit[:TRACES_SHOWN]:
        message = event.ids[0] if event.ids else ""
        lines.append(
            f"| `{message}` | {event.stream} | {event.kind} | {fault.name} | `{event.trace}` |"
        )
    return lines


def _pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend, imported when a report draws its plots: importing
    this module (every ``haclient-chaos`` command does) costs ~0.6 s less."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def _plot_throughput(run: MatrixRun, events: list[Event], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.5))
    t0 = run.started
    width = max(0.25, (run.ended - t0) / 300)  # seconds per bin: about 300 bins at most
    per_workload: dict[str, Counter[int]] = defaultdict(Counter)
    for event in events:
        if event.kind == "received":
            per_workload[_workload(event.stream)][int((event.t - t0) / width)] += 1
    bins = range(int((run.ended - t0) / width) + 1)
    for name, counts in sorted(per_workload.items()):
        rates = [counts.get(b, 0) / width for b in bins]
        ax.plot([b * width for b in bins], rates, label=name, linewidth=0.8)
    for fault in run.faults:
        end = max(fault.end, fault.start + 0.05)
        ax.axvspan(fault.start - t0, end - t0, color="red", alpha=0.15)
    ax.set_xlabel("seconds since the start (faults shaded red)")
    ax.set_ylabel("messages received / s")
    if per_workload:
        ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


@contextmanager
def _counts_figure(xlabel: str, path: Path) -> Iterator[Axes]:
    """Axes for a histogram of counts, saved to ``path`` when the block ends. The count axis
    is logarithmic (the long tail is what matters) but labelled in plain numbers; an empty
    plot says "none"."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    yield ax
    if ax.has_data():
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.text(0.5, 0.5, "none", ha="center", va="center")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=10))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_histogram(values: dict[str, list[float]], xlabel: str, path: Path) -> None:
    """Durations (seconds) per label as a stacked histogram in milliseconds."""
    data = {k: [1000 * v for v in vs] for k, vs in values.items() if vs}
    with _counts_figure(xlabel, path) as ax:
        if data:
            ax.hist(list(data.values()), bins=30, label=list(data), stacked=True)
            if len(data) > 1:
                ax.legend(fontsize=7)


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>haclient chaos run</title>
<style>
body {{ font-family: sans-serif; max-width: 70em; margin: auto; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; }}
th {{ background: #f3f3f3; }} img {{ max-width: 100%; }}
</style></head><body>
{body}
<h2>Throughput, faults shaded</h2><img src="throughput.png" alt="messages received per second">
<h2>Failover downtime</h2><img src="failovers.png" alt="failover downtime in ms">
<h2>Blocked calls</h2><img src="blocked.png" alt="blocked call durations in ms">
<p>The whole ledger: <a href="ledger.jsonl">ledger.jsonl</a>; the final scrape of the metrics
endpoint: <a href="metrics.txt">metrics.txt</a>.</p>
</body></html>
"""


def render_html(markdown: str) -> str:
    """The page: ``markdown`` as HTML (headings, tables; raw HTML in it escaped), then the
    plots."""
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return _PAGE.format(body=body)


def write_report(run: MatrixRun, result: AuditResult, directory: Path) -> Path:
    """Write the report into ``directory`` (created); returns the HTML page's path."""
    directory.mkdir(parents=True, exist_ok=True)
    events = run.ledger.snapshot()
    run.ledger.save(directory / "ledger.jsonl")
    _plot_throughput(run, events, directory / "throughput.png")
    _plot_histogram(
        {"failovers": _failovers(events)},
        "downtime of each failover (ms), as the failover listeners reported it",
        directory / "failovers.png",
    )
    if run.metrics is not None:
        (directory / "metrics.txt").write_text(run.metrics.text)
    _plot_histogram(_blocked(events), "blocked call duration (ms)", directory / "blocked.png")
    markdown = summary_markdown(run, result)
    (directory / "report.md").write_text(markdown)
    page = directory / "report.html"
    page.write_text(render_html(markdown))
    return page
