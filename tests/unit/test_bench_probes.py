"""The bench's machine probes of issue 46: the page-reporting parameters are set back however the probe
ends, a kernel without the module is said and not faked, and the fetch's CPU is split per process."""
from __future__ import annotations

import pytest

from bench import fetch_cpu, fresh_memory


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
