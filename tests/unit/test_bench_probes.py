"""The bench's machine probes of issue 46: the page-reporting parameters are set back however the probe
ends, a kernel without the module is said and not faked, and the fetch's CPU is split per process."""
from __future__ import annotations

import re

import pytest

from bench import boot_delay, cache_direct, fetch_cpu, fresh_memory
from components.mounting import warm
from components.serving.vllm import WARM_CODE


@pytest.fixture
def params_dir(tmp_path, monkeypatch):
    for name, value in (("page_reporting_order", "9"), ("free_bitmap_enable", "Y"), ("reported_kib", "2048")):
        (tmp_path / name).write_text(f"{value}\n")
    monkeypatch.setattr(fresh_memory, "PARAMS", tmp_path)
    return tmp_path


def test_the_parameters_are_set_for_the_block_and_back_after_it_even_when_it_fails(params_dir):
    with pytest.raises(RuntimeError):
        with fresh_memory.params({"page_reporting_order": "11", "free_bitmap_enable": "N"}):
            assert (params_dir / "page_reporting_order").read_text().strip() == "11"
            assert (params_dir / "free_bitmap_enable").read_text().strip() == "N"
            raise RuntimeError("a fill failed")
    assert (params_dir / "page_reporting_order").read_text().strip() == "9"
    assert (params_dir / "free_bitmap_enable").read_text().strip() == "Y"


def test_a_kernel_without_page_reporting_is_said_and_nothing_is_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(fresh_memory, "PARAMS", tmp_path / "absent")
    out = fresh_memory.main(1, 0, 1)
    assert out["skipped"] == "no page_reporting module on this kernel" and out["settings"] == {}


def test_reported_memory_is_read_in_mib(params_dir):
    assert fresh_memory.reported_mib() == 2


def test_the_fetchs_cpu_is_split_per_process():
    later, earlier = fetch_cpu.Cpu(rclone=5.5, server=9.0, own=1.25), fetch_cpu.Cpu(rclone=2.0, server=4.0, own=1.0)
    assert later.minus(earlier) == {"rclone": 3.5, "s3_server": 5.0, "own": 0.25}


def test_each_setting_of_the_fetch_differs_from_the_default_in_one_lever():
    default = fetch_cpu.Setting()
    for name, setting in fetch_cpu.SETTINGS.items():
        changed = [f for f in ("flags", "workers", "pace", "pinned") if getattr(setting, f) != getattr(default, f)]
        assert len(changed) <= 1, (name, changed)
    assert sum(s == default for s in fetch_cpu.SETTINGS.values()) == 1


def test_a_run_holds_page_reporting_back_only_when_asked_and_says_which(params_dir):
    from bench.fresh_memory import page_reporting

    with page_reporting(False) as said:
        assert said == "as the machine has it (page_reporting_order 9)"
        assert (params_dir / "page_reporting_order").read_text().strip() == "9"
    with page_reporting(True) as said:
        assert said == "held back by --hold-page-reporting (page_reporting_order 11; the machine has 9)"
        assert (params_dir / "page_reporting_order").read_text().strip() == "11"
    assert (params_dir / "page_reporting_order").read_text().strip() == "9"


@pytest.mark.parametrize("given, message", [
    ("paced+fast", "variant 'paced+fast': fast unknown; use paced, unpaced, unweighted, yield"),
    ("yield+apart", "variant 'yield+apart' names neither 'paced' nor 'unpaced'"),
    ("paced+unpaced", "or both"),
    (",", "no variant given"),
    ("paced+apart,unpaced", "'apart' pins every start of the run; name it in every variant or in none"),
    ("paced+prefetch+eager", "names two load strategies"),
])
def test_a_boot_delay_variant_that_says_nothing_clear_is_refused_in_one_line(given, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        boot_delay.parse(given)


def test_the_boot_delay_probe_runs_the_shipped_warm_up_and_takes_only_its_pace_off():
    assert boot_delay.parse("paced,unpaced+yield+store-cached+cache-in-memory") == [
        "paced", "unpaced+yield+store-cached+cache-in-memory"]
    assert boot_delay.parse("paced+apart,unpaced+apart") == ["paced+apart", "unpaced+apart"]
    assert boot_delay.parse("paced,paced+io-idle") == ["paced", "paced+io-idle"]
    assert boot_delay.warm_code(["paced"]) == WARM_CODE
    unpaced = boot_delay.warm_code(["unpaced"])
    [shipped] = [x for x in WARM_CODE.splitlines() if x.startswith("RATE_PER_CPU = ")]
    assert warm.RATE_PER_CPU > 0 and shipped not in unpaced and "RATE_PER_CPU = 0\n" in unpaced
    assert [x for x in unpaced.splitlines() if "RATE_PER_CPU" not in x] == [
        x for x in WARM_CODE.splitlines() if "RATE_PER_CPU" not in x]
    both = boot_delay.warm_code(["paced", "no-boot-wait", "wait-short", "two-workers"])
    assert "BOOT_READS = 0\n" in both and "WORKERS = 2\n" in both and "SHORT_FETCH = 0\n" in both
    assert "BOOT_READS = 0\n" not in WARM_CODE and "SHORT_FETCH = 0\n" not in WARM_CODE
    assert warm.BOOT_READS > 0 and len(both.splitlines()) == len(WARM_CODE.splitlines())
    assert boot_delay.parse("paced+warm,paced+warm+cache-hot,paced+warm+no-readahead") == [
        "paced+warm", "paced+warm+cache-hot", "paced+warm+no-readahead"]


def test_the_prefault_writes_the_free_memory_but_the_room_kept_and_says_so(monkeypatch):
    written: list[int] = []
    monkeypatch.setattr(fresh_memory, "drop_caches", lambda: None)
    monkeypatch.setattr(fresh_memory, "fill", lambda gib: written.append(gib) or 2.5)
    monkeypatch.setattr(fresh_memory, "available_gib", lambda: 21)
    assert fresh_memory.prefault() == "18 GiB of free memory written once before the starts, in 2.5 s"
    monkeypatch.setattr(fresh_memory, "available_gib", lambda: 3)
    assert fresh_memory.prefault() == "free memory not written first (less than the room kept)"
    assert written == [18]


def test_the_bench_rclone_gets_the_keepers_cpu_weight_in_a_cgroup_of_its_own(tmp_path, monkeypatch):
    """bench.machine.weigh_fetch: a cgroup per mount beside Docker's containers, at the program's weight (cgroup
    v1 cpu.shares; v2 cpu.weight by Docker's own conversion), rclone's pid in it; removed once empty; no
    Docker cgroup at all is said in one line, not skipped."""
    from bench import machine
    from components.mounting.keeper_tool import FETCH_CPU_SHARES

    v1, v2 = tmp_path / "v1" / "docker", tmp_path / "v2" / "docker"
    monkeypatch.setattr(machine, "DOCKER_CGROUPS", (v1, v2))
    with pytest.raises(RuntimeError, match="no Docker cgroup at .*the bench cannot give rclone the keeper's CPU weight"):
        machine.weigh_fetch(123, machine.fetch_cgroup(tmp_path / "mnt"))
    name = machine.fetch_cgroup(tmp_path / "mnt")
    assert name != machine.fetch_cgroup(tmp_path / "other")
    v1.mkdir(parents=True)
    (v1 / name).mkdir()                       # the kernel makes a new cgroup's files; here the test does
    (v1 / name / "cpu.shares").write_text("1024\n")
    group = machine.weigh_fetch(123, name)
    assert group == v1 / name
    assert (group / "cpu.shares").read_text() == f"{FETCH_CPU_SHARES}\n"
    assert (group / "cgroup.procs").read_text() == "123\n"
    machine.unweighted(123)
    assert (v1.parent / "cgroup.procs").read_text() == "123\n"
    v1.rename(tmp_path / "gone")
    v2.mkdir(parents=True)
    assert (machine.weigh_fetch(7, name, shares=64) / "cpu.weight").read_text() == "3\n"   # docker run --cpu-shares 64
    for f in (v2 / name).iterdir():
        f.unlink()
    machine.remove_fetch_cgroup(name, wait=0)
    assert not (v2 / name).exists()


@pytest.mark.parametrize("argv", [[], ["large"], ["huge", "3"], ["large", "x"], ["large", "0"], ["large", "3", "4"]])
def test_the_cache_direct_probe_refuses_what_it_cannot_run_in_one_line(argv):
    with pytest.raises(SystemExit, match=re.escape("usage: python -m bench.cache_direct large|big|smollm2 ROUNDS")):
        cache_direct.main(argv)


def test_the_cache_direct_probe_finds_the_models_folder_in_rclones_cache_and_only_one(tmp_path):
    folder = tmp_path / "vfs" / "BENCH" / "up-large-model" / "m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (tmp_path / "vfsMeta" / "BENCH" / "up-large-model" / "m").mkdir(parents=True)     # rclone's metadata: not it
    assert cache_direct.cache_folder(tmp_path) == folder
    other = tmp_path / "vfs" / "BENCH" / "other" / "m"
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")
    with pytest.raises(RuntimeError, match="expected one model folder"):
        cache_direct.cache_folder(tmp_path)

