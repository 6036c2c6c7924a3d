"""The curve of issue 46: how a start through the mount compares with local disk as the model grows.
One row per size from results["start"] (bench.start's figures), and a PNG of it drawn from those
same figures (docs/perf-start-curve.png): first-token and load ratios of the cold and warm mount
starts against local disk, and the share of the model warmed when vLLM began to read."""
from __future__ import annotations

import textwrap
from pathlib import Path

RATIOS = (("cold", "first_token_ratio_vs_local"), ("warm", "first_token_ratio_vs_local"),
          ("cold", "load_ratio_vs_local"), ("warm", "load_ratio_vs_local"))


def rows(start: dict) -> list[dict]:
    """Per size (the smallest first): its weights' bytes, local disk's first token and load (medians,
    seconds), the cold and warm ratios (medians and spreads), and the warmed fraction at load begin."""
    out = []
    for name, m in start.items():
        if not isinstance(m, dict) or "detail" not in m or "weights_bytes" not in m:
            continue
        local = m["detail"]["phases"]["local"]
        row = {"size": name, "weights_gb": round(m["weights_bytes"] / 1e9, 2),
               "local_first_token_s": local["first_token"]["median"], "local_load_s": local["load"]["median"]}
        for temp, key in RATIOS:
            if temp in m and key in m[temp]:
                row[f"{temp}.{key}"] = m[temp][key]["median"]
                row[f"{temp}.{key}.spread"] = m[temp][key]["spread"]
        fraction = m.get("cold", {}).get("warmed_fraction_at_load_begin")
        if fraction:
            row["cold.warmed_fraction_at_load_begin"] = fraction["median"]
        out.append(row)
    return sorted(out, key=lambda r: r["weights_gb"])


def plot(curve: list[dict], out: Path, title: str) -> Path:
    """The curve as a PNG: ratio against the weights' size, one line per ratio, the targets dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    xs = [r["weights_gb"] for r in curve]
    for (temp, key), style in zip(RATIOS, ("o-", "s-", "o--", "s--")):
        ys = [r.get(f"{temp}.{key}") for r in curve]
        if all(y is not None for y in ys):
            ax.plot(xs, ys, style, label=f"mount {temp}: {key.replace('_ratio_vs_local', '')}")
    ax.axhline(1.1, color="grey", linewidth=0.8, linestyle=":", label="first-token target 1.1")
    ax.axhline(1.5, color="grey", linewidth=0.8, linestyle="-.", label="load target 1.5")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xlabel("model weights (GB, safetensors)")
    ax.set_ylabel("mount / local disk (median of per-round ratios)")
    ax.set_title("\n".join(textwrap.wrap(title, 110)), fontsize=7)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
