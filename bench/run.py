"""make bench: model starts, upload, preview, model load and `up`, each against a baseline measured in
the same run, on the same S3 server and the same data. Every cold or warm read is measured after
`echo 3 > /proc/sys/vm/drop_caches`.

usage: python -m bench.run [--server rustfs|standin] [--full] [--reads] [--sizes large,big,smollm2]
                           [--skip-vllm] [--load-only] [--stack-only] [--before REF] [--hosts] [--router]
Quick (the default, issue 46): the curve, vLLM's start per read path (local disk, our mount cold and
warm) for three model sizes (bench.models.SIZES: the 6.3 GB and 3.4 GB synthetic Llama models of
bench.big_model and SmolLM2), 5 rounds each; the parts it does not measure are carried over from the
previous results file with the commit that measured them (``carried``).
--reads: also the upload and mount read comparisons on a 1 GiB synthetic set and the stack part (the
quick run before issue 46). --full: all of it with 4 GiB and 5 GiB sets, every read path (the host's
copy, the Run:ai Model Streamer), the compile-cache restart and the big model's stack.
Every figure: the median of bench.stats.SAMPLES samples taken A/B interleaved, with min, max and spread.
--server rustfs (default): real RustFS 1.0.1, the local build rustfs-vllm/rustfs:1.0.1-local, on
loopback (a container; the stack part runs s3Server: rustfs). --server standin: `rclone serve s3`
on loopback, an S3-compatible stand-in that is NOT RustFS. Results go to bench/results-<server>.json.
--before REF also runs the stack part (up, no-op up, no-op preview) with the program as it was at
git revision REF (a worktree under bench/work), right before the current one in the same run, and
reports current/REF ratios (e.g. REF=c383d2f: the last revision on this project's own container and
command providers, to measure the move to pulumi-docker and pulumi-command).
--hosts: only the time of `up` on one simulated serving host and on two (bench/hosts.py).
Writes bench/results-<server>.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import start, stats, weights  # noqa: E402
from bench.load import bench_load  # noqa: E402
from bench.machine import WORK, log  # noqa: E402
from bench.models import SIZES, bench_starts, model_uploaded  # noqa: E402
from bench.report import new_results, noisy, results_file, save, table, write_results  # noqa: E402
from bench.server import MODEL, fresh_server, synthetic_bytes, synthetic_set, uploaded  # noqa: E402
from bench.stack import bench_before, bench_stack, vs_before  # noqa: E402
from bench.upload import bench_upload  # noqa: E402


# ----------------------------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    """The command line; which part runs is main's choice, from these flags."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=("rustfs", "standin"), default="rustfs",
                    help="rustfs: real RustFS (local build); standin: rclone serve s3 (not RustFS)")
    ap.add_argument("--full", action="store_true", help="every part: 4 GiB synthetic set, every read path, the "
                                                        "compile restart, a 5 GiB model for preview")
    ap.add_argument("--reads", action="store_true", help="quick, plus the upload and mount read comparisons "
                                                         "(1 GiB synthetic set) and the stack part")
    ap.add_argument("--sizes", default=",".join(SIZES),
                    help=f"the model sizes whose starts are measured, comma-separated (default {','.join(SIZES)})")
    ap.add_argument("--skip-vllm", action="store_true", help="leave out the vLLM starts")
    ap.add_argument("--skip-big", action="store_true", help="leave out the synthetic models (SmolLM2 only)")
    ap.add_argument("--big-only", action="store_true",
                    help="only the 3.4 GB model's upload and starts, added to results-<server>.json as big")
    ap.add_argument("--load-only", action="store_true",
                    help="only the mount read comparison, into results-<server>-load.json")
    ap.add_argument("--stack-only", action="store_true", help="only the stack part (up, no-op up, no-op preview)")
    ap.add_argument("--skip-stack", action="store_true", help="leave out the stack part")
    ap.add_argument("--starts-only", action="store_true",
                    help="only the vLLM starts per read path (what quick runs; with --full every path and the "
                         "compile restart)")
    ap.add_argument("--before", metavar="REF", help="also run the stack part with the program at git revision REF "
                                                    "and report current/REF ratios")
    ap.add_argument("--preview-5g", action="store_true",
                    help="only the stack part with a 5 GiB model, added to the existing results-<server>.json as "
                         "preview.noop_5g_s (does preview time grow with model size?)")
    ap.add_argument("--router", action="store_true",
                    help="only the stack's one endpoint against a model's port, and cache_aware against round_robin "
                         "(bench/router.py: vllm bench serve), written to bench/results-router.json")
    ap.add_argument("--hold-page-reporting", action="store_true",
                    help="hold this VM's free page reporting back for the run (page_reporting_order 11, set back "
                         "after) and write the free memory once before the starts: idle free memory stays with the "
                         "guest, as on a bare-metal host (bench/fresh_memory.py); the results name it under page_reporting")
    ap.add_argument("--fetch-cpu", action="store_true",
                    help="only the fetch's CPU-seconds per GB on the serving host, per setting (rclone's chunk size and "
                         "streams, the warm-up's threads and pace, RustFS pinned apart), on the 3.36 GB model "
                         "(bench/fetch_cpu.py), written to bench/results-fetch-cpu.json")
    ap.add_argument("--boot-delay", metavar="SIZE:ROUNDS:VARIANTS",
                    help="only why a cold start through the mount begins to load later than local disk: the starts "
                         "of one size with the fetch changed per variant (bench/boot_delay.py, e.g. "
                         "large:2:paced,unpaced+yield), added to bench/results-boot-delay.json")
    ap.add_argument("--cache-direct", metavar="SIZE:ROUNDS",
                    help="only the warm mount's starts against vLLM reading the full VFS cache's files directly "
                         "(rclone out of the way: what FUSE costs the warm path) and local disk "
                         "(bench/cache_direct.py, e.g. large:3), written to bench/results-cache-direct.json")
    ap.add_argument("--hosts", action="store_true",
                    help="only `up` of one model on one simulated serving host and on two (tests/hosts/sim-hosts), "
                         "added to results-<server>.json as hosts")
    args = ap.parse_args()
    args.sizes = sizes(ap, args)      # refused here, before any server starts
    return args


def run_hosts(kind: str) -> None:
    """--hosts: `up` on one simulated serving host and on two, added to results-<server>.json."""
    from bench.hosts import bench_hosts

    out = results_file(kind)
    results = json.loads(out.read_text()) if out.exists() else {}
    bench_hosts(WORK, results, kind)
    out.write_text(json.dumps(results, indent=2))
    log(f"hosts: {results['hosts']}")


def run_fetch_cpu() -> None:
    """--fetch-cpu: bench/fetch_cpu.py on the 3.36 GB model (built once), its table in results-fetch-cpu.json."""
    from bench import fetch_cpu
    from bench.big_model import built

    WORK.mkdir(parents=True, exist_ok=True)
    fetch_cpu.run(built("big"), int(os.environ.get("RUSTFS_VLLM_BENCH_ROUNDS", "3")))


def run_preview_5g(kind: str) -> None:
    """--preview-5g: the stack part with a 5 GiB model, set beside an earlier run's quick preview."""
    out = results_file(kind)
    results = json.loads(out.read_text())
    part: dict = {"upload": {}, "load": results.get("load", {})}
    bench_stack(True, part, kind=kind)
    results["preview"]["noop_5g_s"] = part["preview"]["noop_s"]
    results["preview"]["ratio_5g_vs_quick"] = round(part["preview"]["noop_s"] / results["preview"]["noop_s"], 2)
    results["up_5g"] = part["up"]
    out.write_text(json.dumps(results, indent=2))
    log(f"preview: {results['preview']}")


def run_big_only(kind: str, full: bool) -> None:
    """--big-only: the 3.4 GB model's upload and starts, added to results-<server>.json as big."""
    out = results_file(kind)
    results = json.loads(out.read_text()) if out.exists() else {}
    with fresh_server(kind) as server:
        model = model_uploaded(server, results, "big", 5 if full else 1)
        start.bench_all(server, results, {"big": (model, "up-big-model", weights.BIG_ARGS)}, True,
                        save=lambda: save(results, kind))   # a run stopped early keeps the starts
    results["start"]["big"]["machine_load"] = stats.LOAD.summary()
    results["noisy"] = noisy(results)
    out.write_text(json.dumps(results, indent=2))
    table(results)


def run_load_only(args: argparse.Namespace, results: dict) -> None:
    """--load-only: the mount read comparison alone, into results-<server>-load.json."""
    synthetic = synthetic_set(WORK / "synthetic", synthetic_bytes(args.full), 4)
    with fresh_server(args.server) as server:
        uploaded(server, "up-synthetic", synthetic, "synthetic")
        bench_load(server, synthetic, results)
    results["load"].pop("samples", None)
    results["machine_load"], results["noisy"] = stats.LOAD.summary(), noisy(results)
    out = results_file(args.server, "-load")
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results["load"].items() if "ratio" in k or k == "variants"}, indent=1))


def sizes(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The sizes whose starts run (--sizes; --skip-big: SmolLM2 only); an unknown one is refused in one
    line naming the flag, the value and the sizes there are."""
    chosen = ["smollm2"] if args.skip_big else [x for x in args.sizes.split(",") if x]
    unknown = [x for x in chosen if x not in SIZES]
    if unknown:
        ap.error(f"--sizes {args.sizes!r}: {', '.join(unknown)} unknown; use some of {', '.join(SIZES)}")
    return chosen


def run_starts_only(args: argparse.Namespace, results: dict) -> None:
    """Quick (or --starts-only): the vLLM starts per read path of every size (with --full, every path and
    the compile restart)."""
    if results["mode"] != "quick":
        results["mode"] += ", starts only"
    with fresh_server(args.server) as server:
        bench_starts(server, results, args.full, args.sizes, save=lambda: save(results, args.server))


def run_reads(args: argparse.Namespace, results: dict) -> None:
    """Upload, mount reads and (unless --skip-vllm) the vLLM starts, on one server and one data set."""
    synthetic = synthetic_set(WORK / "synthetic", synthetic_bytes(args.full), 4)
    with fresh_server(args.server) as server:
        bench_upload(server, {"synthetic": synthetic, "real-model": MODEL}, results)
        bench_load(server, synthetic, results, full=args.full)
        save(results, args.server)
        if not args.skip_vllm:
            bench_starts(server, results, args.full, args.sizes, save=lambda: save(results, args.server))


def run_stack_parts(args: argparse.Namespace, results: dict, skip_stack: bool) -> None:
    """The stack part at --before REF, then with this checkout, right after it; then their ratios."""
    if args.before:
        bench_before(args.full, args.before, results, args.server)
    if not skip_stack:
        bench_stack(args.full, results, kind=args.server)
    if args.before and not skip_stack:
        results["vs_before"] = vs_before(results, args.before)


def run_measured(args: argparse.Namespace, page_reporting_state: str) -> None:
    """A run that writes fresh results: --load-only, or the reads (or --starts-only), then the stack part."""
    t_run = time.monotonic()
    results = new_results(args)
    results["page_reporting"] = page_reporting_state
    if args.load_only:
        run_load_only(args, results)
        return
    quick = not (args.full or args.reads or args.stack_only)
    previous = results_file(args.server)
    earlier = json.loads(previous.read_text()) if quick and previous.exists() else {}   # save() overwrites it
    if args.starts_only or quick:
        run_starts_only(args, results)
    elif not args.stack_only:
        run_reads(args, results)
    run_stack_parts(args, results, skip_stack=args.skip_stack or args.starts_only or quick)
    if quick:
        carry(results, earlier)
    write_results(results, args.server, t_run)


def carry(results: dict, old: dict) -> None:
    """The parts a quick run does not measure (upload, load, stack, hosts, ...), kept from the previous
    results ``old`` as they were, and named under ``carried`` with the commit and time that measured them."""
    if not old or old.get("partial"):
        return
    kept = {k: v for k, v in old.items() if v and not results.get(k) and k not in (
        "mode", "started", "server", "commit", "machine_load", "noisy", "run_seconds", "partial", "carried", "start")}
    results.update(kept)
    earlier = old.get("carried", {})
    results["carried"] = {k: earlier.get(k) or {"commit": old.get("commit"), "started": old.get("started")}
                          for k in kept}


def main() -> None:
    """Run the part the flags name: one that adds to an earlier run's results, or a fresh run."""
    args = parse_args()
    if args.router:
        from bench.router import run as run_router

        print(json.dumps(run_router(), indent=2))
    elif args.fetch_cpu:
        run_fetch_cpu()
    elif args.boot_delay:
        from bench import boot_delay

        boot_delay.main(args.boot_delay.split(":", 2))
    elif args.cache_direct:
        from bench import cache_direct

        cache_direct.main(args.cache_direct.split(":", 1))
    elif args.hosts:
        run_hosts(args.server)
    elif args.preview_5g:
        run_preview_5g(args.server)
    else:
        WORK.mkdir(parents=True, exist_ok=True)
        if args.big_only:
            run_big_only(args.server, args.full)
        else:
            from bench.fresh_memory import page_reporting

            from bench.fresh_memory import prefault

            with page_reporting(args.hold_page_reporting) as state:
                if args.hold_page_reporting:    # and the memory backed once, as a bare-metal host's is
                    state += "; " + prefault()
                run_measured(args, state)


if __name__ == "__main__":
    main()
