"""Where a run's figures go and how they read: results-<server>.json (a fresh run's head, saved as
far as the run got, written at the end), the figures flagged as noisy, and the printed table."""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from bench import curve, stats
from bench.machine import ROOT
from bench.server import server_name
from components.mounting.keeper_tool import FETCH_CPU_SHARES


def results_file(kind: str, suffix: str = "") -> Path:
    """bench/results-<server><suffix>.json: the one place a run's figures go."""
    return ROOT / "bench" / f"results-{kind}{suffix}.json"


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return out.stdout.strip()


def new_results(args: argparse.Namespace) -> dict:
    """A fresh run's results, headed by what was measured where (mode, time, server, commit)."""
    results: dict = {"mode": "full" if args.full else "quick", "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "server": server_name(args.server), "commit": _commit(), "upload": {},
                     # the fetch's CPU weight, rclone's and RustFS's, as the program gives them (bench.machine.mount)
                     "fetch_cpu_shares": FETCH_CPU_SHARES}
    return results


def save(results: dict, server: str) -> None:
    """results-<server>.json as far as the run got (its ``partial`` flag until the end)."""
    partial = {**results, "partial": True, "machine_load": stats.LOAD.summary()}
    results_file(server).write_text(json.dumps(
        partial, indent=2, default=lambda o: o.summary(2) if isinstance(o, stats.Samples) else str(o)))


def noisy(results: dict, path: str = "") -> list[str]:
    """Every figure (a summary with samples) whose spread is above stats.SPREAD_FLAG."""
    found = []
    for k, v in results.items():
        if isinstance(v, dict):
            found += [f"{path}{k}"] if "spread" in v and v.get("noisy") else noisy(v, f"{path}{k}.")
    return found


def write_results(results: dict, kind: str, t_run: float) -> None:
    """The run's end: raw samples dropped, machine load, noisy figures and run time added; written, tabled."""
    results.get("load", {}).pop("samples", None)
    results["machine_load"] = stats.LOAD.summary()
    results["noisy"] = noisy(results)
    results["run_seconds"] = round(time.monotonic() - t_run)
    rows = curve.rows(results.get("start", {}))
    if len(rows) > 1:
        results["start"]["curve"] = rows
        results["start"]["curve_png"] = str(draw_curve(results, kind).relative_to(ROOT))
    out = results_file(kind)
    out.write_text(json.dumps(results, indent=2))
    table(results)
    curve_table(rows)
    print(f"\nwritten: {out}")


def draw_curve(results: dict, kind: str) -> Path:
    """docs/perf-start-curve[-<server>][-held].png from the run's own figures (results["start"]["curve"]),
    titled with the rounds the starts had and, when it was held back, the page reporting (bench.run)."""
    held = results.get("page_reporting", "").startswith("held")
    picture = ROOT / "docs" / f"perf-start-curve{'' if kind == 'rustfs' else '-' + kind}{'-held' if held else ''}.png"
    rounds = max((part["detail"]["samples"] for part in results["start"].values()
                  if isinstance(part, dict) and "samples" in part.get("detail", {})), default=stats.SAMPLES)
    return curve.plot(results["start"]["curve"], picture,
                      f"{results['server']}; {results['commit']}, {results['started']}, {rounds} rounds, "
                      f"{results['machine_load'].get('cpus')} cores"
                      f"{'; page reporting ' + results['page_reporting'] if held else ''}")


def curve_table(rows: list[dict]) -> None:
    """results["start"]["curve"]: one line per size."""
    if not rows:
        return
    print(f"\n{'size':8} {'GB':>6} {'local ft s':>10} {'cold ft':>8} {'warm ft':>8} {'cold load':>9} "
          f"{'warm load':>9} {'warmed':>7}")
    for r in rows:
        print(f"{r['size']:8} {r['weights_gb']:>6} {r['local_first_token_s']:>10} "
              + " ".join(f"{r.get(k, ''):>{w}}" for k, w in (
                  ("cold.first_token_ratio_vs_local", 8), ("warm.first_token_ratio_vs_local", 8),
                  ("cold.load_ratio_vs_local", 9), ("warm.load_ratio_vs_local", 9),
                  ("cold.warmed_fraction_at_load_begin", 7))))


def table(r: dict) -> None:
    if r.get("vs_before"):
        v, b = r["vs_before"], r["before"]
        print(f"\nstack, this checkout vs {v['ref']} (ratio < 1: faster now)")
        for key, before, now in (("up.total_s", b["up"]["total_s"], r["up"]["total_s"]),
                                 ("up.noop_s", b["up"]["noop_s"], r["up"]["noop_s"]),
                                 ("preview.noop_s", b["preview"]["noop_s"], r["preview"]["noop_s"])):
            print(f"{key:20} before {before:>8}  now {now:>8}  ratio {v[key]}")
    if "ours_s" not in r.get("upload", {}):
        start_table(r.get("start", {}))
        return
    up, ld = r["upload"], r["load"]
    rows = [
        ("upload.ours_s", up["ours_s"], f"our upload ({up['ours_setting']} workers)"),
        ("upload.rclone_copy_s", up["rclone_copy_s"], "guide: rclone copy --transfers 4"),
        ("upload.ratio_vs_rclone", up["ratio_vs_rclone"], "target >= 1.3"),
        ("upload.ratio_vs_single", up["ratio_vs_single"], "vs single-stream boto3"),
        ("upload.noop_bytes", up.get("noop_bytes"), "target 0"),
        ("upload.noop_s", up.get("noop_s"), "target <= 2"),
        ("preview.noop_s", r.get("preview", {}).get("noop_s"), f"model {r.get('preview', {}).get('model_gib')} GiB"),
        ("load.cold_ratio_vs_ranged_get", ld["cold_ratio_vs_ranged_get"], f"target >= 0.8 ({ld['ours_variant']})"),
        ("load.warm_ratio_vs_local", ld["warm_ratio_vs_local"], "target >= 0.8"),
        ("up.total_s", r.get("up", {}).get("total_s"), "empty -> first completion"),
        ("up.noop_s", r.get("up", {}).get("noop_s"), "pulumi up with nothing changed"),
    ]
    print(f"\n{'key':36} {'median':>8} {'min':>8} {'max':>8}  note (NOISY: spread > "
          f"{stats.SPREAD_FLAG:.0%})")
    for k, v, note in rows:
        if isinstance(v, dict):
            flag = "NOISY " if v.get("noisy") else ""
            print(f"{k:36} {v['median']:>8} {v['min']:>8} {v['max']:>8}  {flag}{note}")
        else:
            print(f"{k:36} {str(v):>8} {'':>8} {'':>8}  {note}")
    start_table(r.get("start", {}))
    if r.get("big", {}).get("upload"):
        b = r["big"]["upload"]
        print(f"big model upload: ours {b['ours_s']['median']} s, rclone copy {b['rclone_copy_s']['median']} s, "
              f"ratio {b['ratio_vs_rclone']['median']} (spread {b['ratio_vs_rclone']['spread']})")
    for name, v in ld.get("variants", {}).items():
        c, w = v["cold_ratio_vs_ranged_get"], v["warm_ratio_vs_local"]
        print(f"  mount {name:28} cold {c['median']:>5} (spread {c['spread']:.2f})  warm {w['median']:>5} "
              f"(spread {w['spread']:.2f})")
    print(f"machine load (1 min): {r.get('machine_load')}")


def start_table(st: dict) -> None:
    """start.<model>: the default path's cold and warm ratios, then every path's phases (medians)."""
    for name, m in st.items():
        if not isinstance(m, dict) or "detail" not in m:
            continue
        print(f"\nstart, {name} (default path {st.get('default_path')}): ratios vs local disk, median (spread)")
        for temp in ("cold", "warm"):
            for k, v in m[temp].items():
                if isinstance(v, dict):
                    print(f"  start.{name}.{temp}.{k:40} {v['median']:>6} ({v['spread']:.2f}){' NOISY' if v['noisy'] else ''}")
        if "warm_first_token_vs_baseline" in m:
            v = m["warm_first_token_vs_baseline"]
            print(f"  start.{name}.warm_first_token_vs_baseline (no --enforce-eager) {v['median']:>6} ({v['spread']:.2f})")
        print(f"  {'path':12} " + " ".join(f"{p:>14}" for p in ("copy", "load_begins", "load", "ready", "first_token")))
        for path, ph in m["detail"]["phases"].items():
            print(f"  {path:12} " + " ".join(f"{ph[p]['median'] if p in ph else '':>14}"
                                           for p in ("copy", "load_begins", "load", "ready", "first_token")))
