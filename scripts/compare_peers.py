#!/usr/bin/python3
"""Ratio table and busbw plots for a chorus-versus-peers run of scripts/compare-peers.sh.

    /usr/bin/python3 scripts/compare_peers.py OUT_DIR/peers.csv OUT_DIR

Reads per-run rows lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs (header
lines, '#' lines and malformed lines are skipped), one row per library, collective, rank count
and size in every repetition. Like ../shared/peers/summarize.py it reduces each
(lib, op, ranks, count) to the median of the per-run medians and recomputes busbw from it
(nccl-tests factors: 2(p-1)/p for all-reduce, (p-1)/p otherwise).

Prints a markdown table (also written to OUT_DIR/table.md), one row per op, p and size, with
the chorus-thread, chorus-shm and chorus-tcp times, the fastest peer and the ratios
chorus / peer of the median times: < 1 means chorus is faster (0.5 = twice as fast), > 1
slower. A peer counts in either mode ("openmpi+keepheap" is Open MPI with glibc keeping freed
memory); chorus's columns use its default-mode rows, or its "+keepheap" rows when the run had
no default mode. tcp/gloo compares chorus over TCP with Gloo, the peer that also uses TCP.
Also writes OUT_DIR/summary.csv (the aggregated rows) and OUT_DIR/busbw_<op>.png: busbw
against size, log axes, one panel per rank count, chorus solid, peers dashed.
Runs in about a second; needs only matplotlib (Agg backend, no display).

Means and load (scripts/compare-peers.sh with BUSY): a line "#mean_us,MEAN,CALLS,SECONDS,MAX_US"
right before a row gives that row's mean per call and slowest call (chorus bench --mean, and the
MPI peers built with scripts/peer_mean.h). A lib named "name@busyN" ran beside N busy loops;
the tables then have a load column and compare like with like, and a second table compares
the means (each the median over runs of the per-run means) and gives the slowest call seen.

Pairs: each run's rows follow a line "# repN_..." naming the run (N: its repetition) and, from
compare-peers.sh under load, "#probe_us,X": the host's 2-rank 32-byte all-reduce median just
before the run. The "paired" columns take, for every repetition, chorus's time over the best
peer's time of that same repetition and cell, keep the repetitions whose two probes are within
1.5 times of each other (both runs saw the host at the same speed), and give the median of
those ratios with how many repetitions it rests on ("0.91 (3/3)").

Ratios from one run are meaningful; absolute figures move ~25 % between runs on this machine.
"""

import argparse
import collections
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

FIELDS = "lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs"
KEEPHEAP = "+keepheap"
CHORUS_PREFIX = "chorus-"
TRANSPORTS = ("thread", "shm", "tcp")
OP_ORDER = {op: i for i, op in enumerate(
    ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "gather",
     "scatter", "allgatherv", "reduce_scatter_v", "alltoallv", "gatherv", "scatterv", "barrier"])}
DPI = 100
CHORUS_COLORS = {"thread": "#1f4e9c", "shm": "#2ca02c", "tcp": "#d62728"}
PEER_COLORS = {"openmpi": "#ff7f0e", "mpich": "#9467bd", "gloo": "#8c564b"}
OTHER_COLORS = ["#17becf", "#bcbd22", "#7f7f7f", "#e377c2"]

# One aggregated (lib, op, ranks, count): times in us, bandwidths in GB/s; mean_us and max_us
# are None for rows that came without a mean line.
Cell = collections.namedtuple("Cell",
                              "bytes median_us min_us algbw busbw runs mean_us max_us reps")
MEAN_PREFIX = "#mean_us,"
PROBE_PREFIX = "#probe_us,"
RUN_PREFIX = "# rep"
SAME_SPEED = 1.5  # two probes this close saw the host at the same speed
LOAD_MARK = "@"


def bus_factor(op, ranks):
    """nccl-tests bus-bandwidth factor, the same one run_all.sh and chorus bench use."""
    if op == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if op in ("broadcast", "reduce"):
        return 1.0
    if op == "barrier":
        return 0.0
    return (ranks - 1) / ranks


def parse_mean(line):
    """(mean_us, max_us) of a "#mean_us,MEAN,CALLS,SECONDS,MAX_US" line, or None."""
    parts = line[len(MEAN_PREFIX):].split(",")
    try:
        return float(parts[0]), float(parts[3]) if len(parts) >= 4 else None
    except (ValueError, IndexError):
        return None


def read_runs(lines):
    """Maps (lib, op, ranks, count) to {"bytes", "meds": run medians, "mins": run minima,
    "means": run means, "maxes": run slowest calls} (the last two only from mean lines)."""
    runs = {}
    pending = None  # the mean line just read, for the row that follows it
    rep, probe = None, None  # of the run whose rows these are
    for line in lines:
        line = line.strip()
        if line.startswith(MEAN_PREFIX):
            pending = parse_mean(line)
            continue
        if line.startswith(RUN_PREFIX):  # a new run: nothing before it belongs to its rows
            digits = line[len(RUN_PREFIX):].split("_")[0]
            rep, probe, pending = (int(digits) if digits.isdigit() else None), None, None
            continue
        if line.startswith(PROBE_PREFIX):
            try:
                probe = float(line[len(PROBE_PREFIX):])
            except ValueError:
                probe = None
            if probe is not None and not probe > 0:
                probe = None
            continue
        mean, pending = pending, None
        if not line or line.startswith("#") or line.startswith("lib,"):
            continue
        parts = line.split(",")
        if len(parts) != 9:
            continue
        try:
            key = (parts[0], parts[1], int(parts[2]), int(parts[3]))
            size = float(parts[4])
            median = float(parts[5])
            minimum = float(parts[6])
        except ValueError:
            continue
        entry = runs.setdefault(key, {"bytes": size, "meds": [], "mins": [], "means": [],
                                      "maxes": [], "reps": {}})
        if rep is not None:
            entry["reps"][rep] = (median, mean[0] if mean is not None else None, probe)
        entry["meds"].append(median)
        entry["mins"].append(minimum)
        if mean is not None:
            entry["means"].append(mean[0])
            if mean[1] is not None:
                entry["maxes"].append(mean[1])
    return runs


def aggregate(runs):
    """Maps each key to a Cell: median of the per-run medians, minimum of the minima."""
    result = {}
    for key, entry in runs.items():
        _, op, ranks, _ = key
        median = statistics.median(entry["meds"])
        algbw = entry["bytes"] / (median * 1e-6) / 1e9 if median > 0 else 0.0
        mean = statistics.median(entry["means"]) if entry["means"] else None
        slowest = max(entry["maxes"]) if entry["maxes"] else None
        result[key] = Cell(entry["bytes"], median, min(entry["mins"]), algbw,
                           algbw * bus_factor(op, ranks), len(entry["meds"]), mean, slowest,
                           entry["reps"])
    return result


def split_load(lib):
    """"openmpi@busy1" -> ("openmpi", "busy1"); a lib without a load -> (lib, "")."""
    name, _, load = lib.partition(LOAD_MARK)
    return name, load


def load_sort_key(load):
    digits = "".join(ch for ch in load if ch.isdigit())
    return (int(digits) if digits else -1, load)


def is_chorus(lib):
    return lib.startswith(CHORUS_PREFIX)


def base_name(lib):
    """The library without its mode: "gloo+keepheap" -> "gloo"."""
    return lib[: -len(KEEPHEAP)] if lib.endswith(KEEPHEAP) else lib


def chorus_suffix(agg):
    """"" when the run measured chorus in default mode, else "+keepheap" (MODES=keepheap)."""
    libs = {key[0] for key in agg if is_chorus(key[0])}
    if any(not lib.endswith(KEEPHEAP) for lib in libs):
        return ""
    return KEEPHEAP if libs else ""


def op_sort_key(op):
    return (OP_ORDER.get(op, len(OP_ORDER)), op)


def build_rows(agg):
    """One dict per (load, op, ranks, count) with chorus times, best peer and ratios (None =
    absent), for medians and, where the rows had them, means."""
    suffix = chorus_suffix(agg)
    cells = {}
    for (lib, op, ranks, count), value in agg.items():
        name, load = split_load(lib)
        cells.setdefault((load, op, ranks, count), {})[name] = value
    rows = []
    for load, op, ranks, count in sorted(
            cells, key=lambda c: (load_sort_key(c[0]), op_sort_key(c[1]), c[2], c[3])):
        cell = cells[(load, op, ranks, count)]
        row = {"load": load, "op": op, "ranks": ranks, "count": count,
               "bytes": next(iter(cell.values())).bytes}
        for stat, field in (("", "median_us"), ("mean:", "mean_us")):
            for transport in TRANSPORTS:
                value = cell.get(CHORUS_PREFIX + transport + suffix)
                row[stat + transport] = getattr(value, field) if value else None
            peers = {lib: getattr(value, field) for lib, value in cell.items()
                     if not is_chorus(lib) and getattr(value, field) is not None}
            row[stat + "best_lib"] = min(peers, key=peers.get) if peers else None
            row[stat + "best"] = peers[row[stat + "best_lib"]] if peers else None
            gloo = [t for lib, t in peers.items() if base_name(lib) == "gloo"]
            row[stat + "gloo"] = min(gloo) if gloo else None
            for transport in TRANSPORTS:
                row[stat + transport + "/best"] = ratio(row[stat + transport], row[stat + "best"])
            row[stat + "tcp/gloo"] = ratio(row[stat + "tcp"], row[stat + "gloo"])
            peer_cells = [value for lib, value in cell.items() if not is_chorus(lib)]
            for transport in TRANSPORTS:
                row[stat + transport + "/paired"] = paired_ratio(
                    cell.get(CHORUS_PREFIX + transport + suffix), peer_cells,
                    0 if stat == "" else 1)
        slowest = {lib: value.max_us for lib, value in cell.items() if value.max_us is not None}
        row["slowest"] = slowest
        rows.append(row)
    return rows, suffix


def paired_ratio(chorus, peers, index):
    """(median ratio, repetitions used, repetitions with both sides) of chorus's time over the
    best peer's in the same repetition (index 0: medians, 1: means), counting a repetition only
    when the two runs' probes agree; None when no repetition has both sides."""
    if chorus is None:
        return None
    ratios, both = [], 0
    for rep, ours in chorus.reps.items():
        theirs = [(cell.reps[rep][index], cell.reps[rep][2]) for cell in peers
                  if rep in cell.reps and cell.reps[rep][index] is not None]
        if ours[index] is None or not theirs:
            continue
        both += 1
        best, best_probe = min(theirs, key=lambda t: t[0])
        probes = [p for p in (ours[2], best_probe) if p is not None]
        if len(probes) == 2 and max(probes) > SAME_SPEED * min(probes):
            continue
        if best > 0:
            ratios.append(ours[index] / best)
    if not both:
        return None
    return (statistics.median(ratios) if ratios else None, len(ratios), both)


def format_paired(value):
    if value is None:
        return "-"
    median, used, both = value
    return ("-" if median is None else f"{median:.2f}") + f" ({used}/{both})"


def ratio(num, den):
    if num is None or den is None or den <= 0:
        return None
    return num / den


def format_size(size):
    """32 -> "32 B", 1048576 -> "1 MiB", 1536 -> "1.5 KiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size:.0f} B"


def format_us(value):
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 1000 else f"{value:.3g}"


def format_ratio(value):
    return "-" if value is None else f"{value:.2f}"


def markdown_table(rows, suffix, max_runs):
    mode = "default mode" if suffix == "" else "keepheap mode (the run had no default mode)"
    loads = any(row["load"] for row in rows)
    means = any(row["mean:best"] is not None or any(row["mean:" + t] is not None
                                                    for t in TRANSPORTS) for row in rows)
    # Paired columns only where runs named their repetitions and had peers beside them.
    paired = [t for t in TRANSPORTS if any(row[t + "/paired"] is not None for row in rows)]
    lines = []
    for stat, title in (("", "per-run median time per call"), ("mean:", "per-run mean time per "
                                                                 "call")):
        if stat and not means:
            continue
        if lines:
            lines.append("")
        lines += [
            f"Median over {max_runs} run(s) of {title}, in µs. Ratios are chorus / peer time: "
            "< 1 means chorus is faster. chorus columns: " + mode + "; peers: their faster mode.",
            "",
            ("| load " if loads else "") + "| op | p | size | chorus thread | chorus shm "
            "| chorus tcp | best peer (name) | thread/best | shm/best | tcp/best | tcp/gloo "
            + "".join(f"| {t} paired " for t in paired) + "|",
            ("|---" if loads else "") + "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:"
            + "|---:" * len(paired) + "|",
        ]
        for row in rows:
            best = ("-" if row[stat + "best"] is None
                    else f"{format_us(row[stat + 'best'])} ({row[stat + 'best_lib']})")
            cells = [row["load"] or "quiet"] if loads else []
            cells += [row["op"], str(row["ranks"]), format_size(row["bytes"])]
            cells += [format_us(row[stat + t]) for t in TRANSPORTS]
            cells.append(best)
            cells += [format_ratio(row[stat + t + "/best"]) for t in TRANSPORTS]
            cells.append(format_ratio(row[stat + "tcp/gloo"]))
            cells += [format_paired(row[stat + t + "/paired"]) for t in paired]
            lines.append("| " + " | ".join(cells) + " |")
    if means:
        lines += ["", "The slowest call of any run, in µs:", ""]
        libs = sorted({lib for row in rows for lib in row["slowest"]},
                      key=lambda lib: (not is_chorus(lib), lib))
        lines.append(("| load " if loads else "") + "| op | p | size | " + " | ".join(libs) + " |")
        lines.append(("|---" if loads else "") + "|---|---:|---:" + "|---:" * len(libs) + "|")
        for row in rows:
            cells = [row["load"] or "quiet"] if loads else []
            cells += [row["op"], str(row["ranks"]), format_size(row["bytes"])]
            cells += [format_us(row["slowest"].get(lib)) for lib in libs]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_csv(agg):
    lines = [FIELDS]
    for key in sorted(agg, key=lambda k: (k[2], op_sort_key(k[1]), k[3], k[0])):
        lib, op, ranks, count = key
        c = agg[key]
        lines.append(f"{lib},{op},{ranks},{count},{c.bytes:.0f},{c.median_us:.3f},"
                     f"{c.min_us:.3f},{c.algbw:.4f},{c.busbw:.4f}")
    return "\n".join(lines) + "\n"


def line_style(lib, others):
    """chorus solid, peers dashed; a peer's two modes share a colour and differ in marker."""
    base = base_name(split_load(lib)[0])
    if is_chorus(lib):
        transport = base[len(CHORUS_PREFIX):]
        return {"color": CHORUS_COLORS.get(transport, "#000000"), "linestyle": "-",
                "marker": "o", "linewidth": 2.0}
    if base not in PEER_COLORS and base not in others:
        others[base] = OTHER_COLORS[len(others) % len(OTHER_COLORS)]
    color = PEER_COLORS.get(base, others.get(base))
    return {"color": color, "linestyle": "--", "linewidth": 1.4,
            "marker": "s" if lib.endswith(KEEPHEAP) else "x"}


def plot_op(agg, op, suffix, path, load=""):
    """busbw vs size for one collective under one load, a panel per rank count."""
    keys = [k for k in agg if k[1] == op and split_load(k[0])[1] == load and
            (not is_chorus(k[0]) or k[0].endswith(KEEPHEAP) == (suffix == KEEPHEAP))]
    ranks_list = sorted({k[2] for k in keys})
    libs = sorted({k[0] for k in keys}, key=lambda lib: (not is_chorus(lib), lib))
    width = 6.5 * len(ranks_list) + 2.0  # 2 inches on the right for the shared legend
    fig, axes = plt.subplots(1, len(ranks_list), figsize=(width, 4.8), dpi=DPI, squeeze=False,
                             sharey=True)
    others = {}
    sizes = sorted({agg[k].bytes for k in keys})
    for ax, ranks in zip(axes[0], ranks_list):
        for lib in libs:
            points = sorted((agg[k].bytes, agg[k].busbw) for k in keys
                            if k[0] == lib and k[2] == ranks and agg[k].busbw > 0)
            if points:
                ax.plot([x for x, _ in points], [y for _, y in points], label=lib,
                        **line_style(lib, others))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # Label the measured sizes as people say them (1 MiB), not as powers of two.
        ax.set_xticks(sizes)
        ax.set_xticklabels([format_size(size) for size in sizes])
        ax.minorticks_off()
        if len(sizes) == 1:
            ax.set_xlim(sizes[0] / 2, sizes[0] * 2)
        ax.set_xlabel("total buffer size (bytes)")
        ax.set_title(f"{op}, p = {ranks}")
        ax.grid(True, which="major", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel("busbw (GB/s)")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    for ax in axes[0][:-1]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    fig.legend(handles, labels, loc="center right", fontsize=9, frameon=False)
    beside = f" ({load})" if load else ""
    fig.suptitle(f"{op}{beside}: bus bandwidth vs size\n"
                 "chorus solid, peers dashed; median of per-run medians", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1 - 2.0 / width, 1))
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv_path", help="per-run rows, e.g. OUT_DIR/peers.csv")
    parser.add_argument("out_dir", help="directory for table.md, summary.csv and busbw_<op>.png")
    args = parser.parse_args()

    with open(args.csv_path, encoding="utf-8") as f:
        agg = aggregate(read_runs(f))
    if not agg:
        sys.exit(f"compare_peers.py: no benchmark rows in {args.csv_path}")
    os.makedirs(args.out_dir, exist_ok=True)
    rows, suffix = build_rows(agg)
    max_runs = max(value.runs for value in agg.values())
    table = markdown_table(rows, suffix, max_runs)
    with open(os.path.join(args.out_dir, "table.md"), "w", encoding="utf-8") as f:
        f.write(table)
    with open(os.path.join(args.out_dir, "summary.csv"), "w", encoding="utf-8") as f:
        f.write(summary_csv(agg))
    for load in sorted({split_load(k[0])[1] for k in agg}, key=load_sort_key):
        for op in sorted({k[1] for k in agg}, key=op_sort_key):
            name = f"busbw_{op}_{load}.png" if load else f"busbw_{op}.png"
            plot_op(agg, op, suffix, os.path.join(args.out_dir, name), load)
    print(table, end="")

    # A comparison without one side is a failed run, even though the files are written.
    missing = [side for side, present in (("chorus", any(is_chorus(k[0]) for k in agg)),
                                          ("peer", any(not is_chorus(k[0]) for k in agg)))
               if not present]
    if missing:
        sys.exit(f"compare_peers.py: no {' or '.join(missing)} rows in {args.csv_path}")


if __name__ == "__main__":
    main()
