"""Figures of a send run: one row's numbers, our/Redis ratios, the targets and the PNG chart.

Knows the row names and the targets; knows nothing about sockets or subprocesses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench._common import percentile, report


@dataclass(frozen=True, slots=True)
class Row:
    mode: str  # "SYNC" or "ASYNC"
    connections: int
    window: int
    body_size: int

    @property
    def name(self) -> str:
        size = f"{self.body_size // 1024}KiB" if self.body_size >= 1024 else f"{self.body_size}B"
        return f"{self.mode}-{self.connections}x{self.window}-{size}"


@dataclass(frozen=True, slots=True)
class Figures:
    """One server on one row. Latencies in ms; `failed` counts non-SUCCESS replies;
    `cpu_us_msg` is the server's CPU time per reply, which contention on the machine moves
    much less than msgs/s."""

    msgs_s: float
    mb_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    failed: int
    unanswered: int
    cpu_us_msg: float
    #: commit-log flushes per stored message (the broker only; -1 when not known)
    flushes_per_msg: float = -1.0

    @property
    def valid(self) -> bool:
        return self.failed == 0 and self.unanswered == 0 and self.msgs_s > 0


def figures(
    latencies_us: list[float],
    failed: int,
    unanswered: int,
    row: Row,
    seconds: float,
    *,
    cpu_us_msg: float,
) -> Figures:
    latencies_us.sort()
    msgs_s = len(latencies_us) / seconds
    return Figures(
        msgs_s=msgs_s,
        mb_s=msgs_s * row.body_size / 1e6,
        p50_ms=percentile(latencies_us, 0.50) / 1000,
        p99_ms=percentile(latencies_us, 0.99) / 1000,
        p999_ms=percentile(latencies_us, 0.999) / 1000,
        failed=failed,
        unanswered=unanswered,
        cpu_us_msg=cpu_us_msg,
    )


def print_row(server: str, row: Row, result: Figures, all_msgs_s: str) -> None:
    """The median run's figures, then every run's msgs/s (how noisy the machine was)."""
    report(
        f"send {server} {row.name}",
        msgs_s=round(result.msgs_s),
        mb_s=result.mb_s,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        p999_ms=result.p999_ms,
        cpu_us_msg=result.cpu_us_msg,
        **({"flushes_per_msg": result.flushes_per_msg} if result.flushes_per_msg >= 0 else {}),
        failed=result.failed,
        unanswered=result.unanswered,
        runs_msgs_s=all_msgs_s,
    )


def print_ratios(row: Row, ours: Figures, redis: Figures) -> None:
    report(
        f"ratio {row.name}",
        msgs_ours_over_redis=ours.msgs_s / redis.msgs_s if redis.msgs_s else 0.0,
        p99_ours_over_redis=ours.p99_ms / redis.p99_ms if redis.p99_ms else 0.0,
    )


# (row name, figure, bound): ours / Redis must be >= bound for "msgs", <= bound for "p99"
TARGETS: Final = (
    ("SYNC-8x1-1KiB", "msgs", 1.0),
    ("SYNC-8x16-1KiB", "msgs", 0.75),
    ("ASYNC-8x16-1KiB", "msgs", 0.6),
    ("SYNC-8x1-1KiB", "p99", 1.5),
)


def print_targets(ours: dict[str, Figures], redis: dict[str, Figures]) -> int:
    """One PASS/MISS line per target that both servers ran; returns the number missed."""
    missed = 0
    for name, figure, bound in TARGETS:
        if name not in ours or name not in redis:
            continue
        a, b = ours[name], redis[name]
        if figure == "msgs":
            ratio = a.msgs_s / b.msgs_s if b.msgs_s else 0.0
            ok = ratio >= bound
            rule = f">={bound}"
        else:
            ratio = a.p99_ms / b.p99_ms if b.p99_ms else float("inf")
            ok = ratio <= bound
            rule = f"<={bound}"
        ok = ok and a.valid and b.valid
        missed += not ok
        report(f"target {name} {figure}", ratio=ratio, bound=rule, verdict="PASS" if ok else "MISS")
    return missed


_PANELS: Final = (
    ("msgs_s", "msgs/s (log)", "%.0f"),
    ("p99_ms", "p99 ack latency, ms (log)", "%.2f"),
    ("cpu_us_msg", "server CPU per message, us (log)", "%.0f"),
)
_SERVERS: Final = (("rmq-broker", "#1f77b4"), ("Redis 7 XADD", "#d62728"))


def chart(
    rows: Sequence[Row], ours: dict[str, Figures], redis: dict[str, Figures], path: Path
) -> None:
    """Panels of msgs/s, p99 and server CPU per message by row, ours beside Redis, log scales
    (the rows span three orders of magnitude); written as PNG to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names = [row.name for row in rows]
    xs = range(len(names))
    width = 0.38
    fig, axes = plt.subplots(len(_PANELS), 1, figsize=(11, 11), sharex=True)
    servers = list(zip(_SERVERS, (ours, redis), strict=True))
    for axis, (attr, label, fmt) in zip(axes, _PANELS, strict=True):
        shown: list[float] = []
        for offset, ((server, colour), data) in enumerate(servers):
            values = [getattr(data[n], attr) if n in data else 0.0 for n in names]
            shown += [value for value in values if value > 0]
            bars = axis.bar([x + (offset - 0.5) * width for x in xs], values, width,
                            label=server, color=colour)  # fmt: skip
            axis.bar_label(bars, fmt=fmt, fontsize=8)
        axis.set_yscale("log")
        if shown:  # bars from well below the smallest value, room above the largest for labels
            axis.set_ylim(min(shown) / 4, max(shown) * 4)
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(NullFormatter())
        axis.set_ylabel(label)
        axis.grid(axis="y", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper right", ncols=2)
    fig.suptitle("SEND_MESSAGE_V2 vs Redis XADD: 8 connections x W in flight, loopback", x=0.4)
    axes[-1].set_xticks(list(xs), names, rotation=20, ha="right")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
