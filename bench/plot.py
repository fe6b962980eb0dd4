"""Draw a run's timeline: throughput and latency percentiles over time, one column per phase.

matplotlib is an optional extra (``pip install 'bookie[plot]'``); it is imported only when a plot
is asked for, and its absence is one clear error before the run starts (``require_matplotlib``),
not a traceback after it.
"""

from __future__ import annotations

INSTALL_HINT = ("--plot needs matplotlib, an optional extra: pip install 'bookie[plot]' "
                "(or pip install matplotlib)")


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get it."""


def require_matplotlib():
    """Import matplotlib with a file-only backend.

    Returns:
        the ``matplotlib.pyplot`` module.
    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    try:
        import matplotlib  # lazy: matplotlib
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None
    matplotlib.use("Agg")  # no display needed: the plot goes to a file
    import matplotlib.pyplot as plt  # lazy: matplotlib
    return plt


def plot_result(result: dict, path: str) -> None:
    """Write ``path`` (PNG, or any format matplotlib knows from the suffix): for each phase, the
    throughput per interval (ops/s, with MB/s on a second axis) above the latency percentiles
    per interval (p50, p99, p99.9, max and the running p99) on a log scale."""
    plt = require_matplotlib()
    phases = [(name, ph) for name, ph in result["phases"].items() if ph.get("timeline")]
    if not phases:
        phases = list(result["phases"].items())
    ncols = max(len(phases), 1)
    fig, axes = plt.subplots(2, ncols, figsize=(6 * ncols, 7), squeeze=False, sharex="col")
    for col, (name, ph) in enumerate(phases):
        timeline = ph.get("timeline") or []
        t = [p["t_s"] for p in timeline]
        top, bottom = axes[0][col], axes[1][col]
        unit = ph.get("unit", "ops")
        # Each point closes an interval: draw it as a step over that interval, from 0.
        x = [0.0] + t
        ops = [p["ops_per_s"] for p in timeline]
        top.plot(x, ops[:1] + ops, drawstyle="steps-pre", color="tab:blue")
        top.set_ylabel(f"{unit}/s")
        top.set_ylim(bottom=0)
        if ph.get("ops_per_s"):
            mb_per_op = ph["mb_per_s"] / ph["ops_per_s"]
            if mb_per_op > 0:
                # MB/s is proportional to ops/s: a second scale, not a second line.
                top.secondary_yaxis("right", functions=(lambda v, k=mb_per_op: v * k,
                                                        lambda v, k=mb_per_op: v / k)
                                    ).set_ylabel("MB/s")
        top.set_title(f"{result['tool']} / {name}: {ph['ops_per_s']:,.0f} {unit}/s, "
                      f"p99 {ph['latency_ms']['p99']:.2f} ms")
        top.grid(True, alpha=0.3)
        for key, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"),
                           ("max_ms", "max"), ("p99_total_ms", "p99 so far")):
            # An interval without completions has no latency: a gap, not a zero.
            values = [p[key] if p[key] > 0 else float("nan") for p in timeline]
            bottom.plot(t, values, marker=".", label=label,
                        linestyle=":" if key == "p99_total_ms" else "-")
        bottom.set_yscale("log")
        bottom.set_ylabel("latency (ms)")
        bottom.set_xlabel("elapsed (s)")
        bottom.grid(True, which="both", alpha=0.3)
        bottom.legend(fontsize="small")
    host = result["host"]
    fig.suptitle(f"bookie bench {result['tool']}  {result['date']}  {host['cores']} cores, "
                 f"load {host['load_avg'][0]:.2f}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
