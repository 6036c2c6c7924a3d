"""The upload part: the program's sync (its default workers) against the guide's `rclone copy
--transfers 4` and single-stream boto3, per data set, interleaved; then the hash times and a
no-op sync."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

from boto3.s3.transfer import TransferConfig

from bench import stats
from bench.machine import ACCESS, MIB, SECRET, WORK, drop_caches, log, timed
from bench.server import Server, empty_bucket
from components.providers.model_upload import DEFAULT_FILE_WORKERS, DEFAULT_PART_WORKERS, sync
from components.storage import manifest as manifest_mod

DEFAULT_WORKERS = (DEFAULT_FILE_WORKERS, DEFAULT_PART_WORKERS)  # what the program uses


# --------------------------------------------------------------------------------------- upload
def bench_upload(server: Server, sources: dict[str, Path], results: dict, headline: str | None = "synthetic",
                 rounds: int = stats.SAMPLES) -> None:
    """Ours (the program's sync, its default workers) against the guide's `rclone copy
    --transfers 4` and single-stream boto3, interleaved, SAMPLES rounds, into an emptied bucket."""
    out: dict[str, dict] = {}
    for label, folder in sources.items():
        cache = WORK / "hash-cache" / f"{label}.json"
        drop_caches()
        hash_s, manifest = timed(manifest_mod.build, str(folder), str(cache))
        bucket = server.fresh_bucket(f"up-{label}")
        single = TransferConfig(use_threads=False, multipart_threshold=64 * MIB, multipart_chunksize=64 * MIB)
        props = {"endpoint": server.endpoint, "access_key": ACCESS, "secret_key": SECRET, "bucket": bucket,
                 "prefix": "m", "source": str(folder), "manifest": manifest}
        rclone = [shutil.which("rclone"), "copy", str(folder), f"BENCH:{bucket}/m", "--transfers", "4",
                  "--config", "/dev/null"]

        def sample(fn) -> Callable[[], float]:
            def run() -> float:
                empty_bucket(server, bucket)
                drop_caches()
                return timed(fn)[0]
            return run

        def one_by_one() -> None:
            for rel in sorted(manifest):
                server.client.upload_file(str(folder / rel), bucket, f"m/{rel}", Config=single)

        got = stats.interleaved({
            "ours": sample(lambda: sync(dict(props))),
            "rclone_copy": sample(lambda: subprocess.run(rclone, env=server.rclone_env(), check=True)),
            "boto3_single": sample(one_by_one)}, n=rounds)
        empty_bucket(server, bucket)
        sync(dict(props))      # then a no-op sync: everything there already (an `up` with no change)
        noop_s, noop = timed(sync, dict(props))
        row = {"bytes": sum(e["size"] for e in manifest.values()), "hash_cold_s": round(hash_s, 2),
               "hash_warm_s": round(timed(manifest_mod.build, str(folder), str(cache))[0], 3),
               "noop_sync_s": round(noop_s, 2), "noop_sync_bytes": noop["bytes"], "bucket": bucket,
               **{f"{k}_s": v.summary(2) for k, v in got.items()},
               "ratio_vs_rclone": stats.ratio(got["rclone_copy"], got["ours"]).summary(),
               "ratio_vs_single": stats.ratio(got["boto3_single"], got["ours"]).summary()}
        out[label] = row
        log(f"upload {label}: ours {row['ours_s']['median']} s, rclone copy {row['rclone_copy_s']['median']} s, "
            f"ratio {row['ratio_vs_rclone']['median']} (spread {row['ratio_vs_rclone']['spread']})")
    if headline is None:
        results["upload"] = {"detail": out}
        return
    syn = out[headline]
    results["upload"] = {
        "detail": out, "ours_setting": f"{DEFAULT_WORKERS[0]}x{DEFAULT_WORKERS[1]}",
        "ours_s": syn["ours_s"], "rclone_copy_s": syn["rclone_copy_s"], "boto3_single_s": syn["boto3_single_s"],
        "ratio_vs_rclone": syn["ratio_vs_rclone"], "ratio_vs_single": syn["ratio_vs_single"],
        "real_model_ratio_vs_rclone": out["real-model"]["ratio_vs_rclone"],
        "sync_noop_bytes": syn["noop_sync_bytes"] + out["real-model"]["noop_sync_bytes"]}
