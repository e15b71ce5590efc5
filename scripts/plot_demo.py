#!/usr/bin/python3
"""Renders the figures of `chorus demo --plot DIR` from its JSON record.

    /usr/bin/python3 scripts/plot_demo.py DIR/demo.json DIR

writes DIR/panel1.png (values stored per device), DIR/panel2.png (modeled and measured bytes per
rank, grouped bars) and DIR/table.png (which participant owns which values). Only matplotlib is
needed; the Agg backend keeps it usable on machines without a display.
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

DPI = 100
COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]


def format_value(v):
    """Integers without a decimal point, other numbers with at most three decimals."""
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.3f}".rstrip("0").rstrip(".")


def bar_panel(panel, title, path, ylabel=None):
    """Grouped bars: one group per label, one bar per series, each bar annotated."""
    labels = panel["labels"]
    series = panel["series"]
    n = len(series)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=DPI)
    top = max((max(s["y"]) for s in series if s["y"]), default=1) or 1
    for k, s in enumerate(series):
        xs = [i + (k - (n - 1) / 2) * width for i in range(len(labels))]
        bars = ax.bar(xs, s["y"], width=width * 0.95, label=s["label"],
                      color=COLORS[k % len(COLORS)])
        for bar, v in zip(bars, s["y"]):
            ax.annotate(format_value(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                        fontsize=10)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=11)
    ax.set_xlabel("collective", fontsize=11)
    ax.set_ylabel(ylabel or panel["ylabel"], fontsize=11)
    ax.set_ylim(0, top * 1.3)
    ax.set_title(title, fontsize=12)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper center", ncol=n, fontsize=10, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def table_panel(diagram, path):
    """The ownership table as a matplotlib table, header row shaded."""
    panel = diagram["panel"]
    headers, rows = panel["headers"], panel["rows"]
    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.55 * (len(rows) + 2))), dpi=DPI)
    ax.axis("off")
    table = ax.table(cellText=rows, colLabels=headers, loc="center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(12)
    table.scale(1, 2)
    for (row, col), cell in table.get_celld().items():
        if row == 0:
            cell.set_facecolor("#DDE4F0")
            cell.set_text_props(weight="bold")
        elif col == 0:
            cell.set_text_props(weight="bold")
    ax.set_title(diagram["title"], fontsize=13)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def render(record, out_dir):
    """Draws the three figures of `record` (a demo.json's content) into out_dir; returns their
    paths. Also what `python3 -m chorus.demo --plot` calls (the package ships this file)."""
    panels = record["data"]["panels"]
    if len(panels) != 2:
        sys.exit(f"plot_demo.py: expected 2 panels, found {len(panels)}")
    config = record["data"].get("config", {})
    setup = f'{record.get("environment", {}).get("deviceCount", "?")} ranks'
    if "count" in config and "dtype" in config:
        setup += f', {config["count"]} x {config["dtype"]}'
    os.makedirs(out_dir, exist_ok=True)

    bar_panel(panels[0], f"Values each rank stores after each collective ({setup})",
              os.path.join(out_dir, "panel1.png"))
    # The record keeps the seed's axis label; with a measured series next to the model the
    # axis is no longer only "modeled".
    bar_panel(panels[1], f"Bytes sent per rank: ring model vs traffic counters ({setup})",
              os.path.join(out_dir, "panel2.png"),
              ylabel="payload bytes sent per rank" if len(panels[1]["series"]) > 1 else None)
    table_panel(record["diagram"], os.path.join(out_dir, "table.png"))
    return [os.path.join(out_dir, name) for name in ("panel1.png", "panel2.png", "table.png")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_path", help="demo.json written by `chorus demo`")
    parser.add_argument("out_dir", help="directory for panel1.png, panel2.png and table.png")
    args = parser.parse_args()

    with open(args.json_path, encoding="utf-8") as f:
        record = json.load(f)
    for path in render(record, args.out_dir):
        print(path)


if __name__ == "__main__":
    main()
