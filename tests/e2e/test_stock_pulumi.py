"""With your own Pulumi (issue 43): the project run as a user with a stock Pulumi installation runs it,
from a plain shell. No scripts/env.sh, nothing activated, no PYTHONPATH: PATH holds the Pulumi CLI with
the upstream language host and shims beside it (as a release installs them in ~/.pulumi/bin), the
plugin cache holds the real docker and command plugins (as `pulumi plugin install` leaves them), the
backend is a folder the user logged in to.

In a scratch copy of the project (its tracked files, no .venv): `pulumi install` makes the virtualenv
Pulumi.yaml names from requirements.txt, `pulumi stack init`, `pulumi config set`, `pulumi preview`,
`pulumi up` to a served completion (the OpenAI client with its defaults), then `pulumi destroy
--run-program` and `pulumi stack rm`. Real engine, upstream host, real plugins, the S3 server of
tests/s3_under_test.py, our vLLM image serving SmolLM2."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import docker
import pytest

from tests import leftovers, s3_under_test
from tests.helpers import ROOT, free_port, free_ports, pulumi_env
from tests.pulumi_cli import remove_logs

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
pytestmark = pytest.mark.skipif(not MODEL.joinpath("model.safetensors").exists(),
                                reason="scripts/build-smollm2-model makes the model")


def scratch_copy(into: Path) -> None:
    """The project's files as a clone has them (tracked and new, not ignored): no .venv, no .state."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)


def plain_shell(tmp: Path) -> dict[str, str]:
    """The environment of a user's shell with a stock Pulumi: this process's, less everything of
    scripts/env.sh and the test run (our PATH entries, PYTHONPATH, an active virtualenv, the project's
    plugin home), plus the CLI's folder, a plugin cache of the real plugins, a backend folder."""
    ours = pulumi_env()
    cli = shutil.which("pulumi", path=ours["PATH"])
    assert cli, "scripts/bootstrap has put no pulumi on the project's PATH"
    cli_dir = os.path.dirname(os.path.realpath(cli))
    for name in ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"):
        assert os.access(os.path.join(cli_dir, name), os.X_OK), f"no {name} beside {cli}"
    skip = {str(ROOT / ".tools" / "bin"), str(ROOT / ".venv" / "bin")}
    path = [cli_dir] + [p for p in os.environ["PATH"].split(os.pathsep) if p and p not in skip]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PULUMI_", "RUSTFS_VLLM_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    home = tmp / "pulumi-home"
    env.update(PATH=os.pathsep.join(path), PULUMI_HOME=str(home), PULUMI_BACKEND_URL=f"file://{tmp / 'backend'}",
               PULUMI_CONFIG_PASSPHRASE="stock-pulumi-test", PULUMI_SKIP_UPDATE_CHECK="true")
    (tmp / "backend").mkdir()
    # the user's plugin cache: the real plugins, installed the stock way
    for name, version in (("docker", "5.1.0"), ("command", "1.2.1")):
        binary = Path(ours["PULUMI_HOME"]) / "plugins" / f"resource-{name}-v{version}" / f"pulumi-resource-{name}"
        subprocess.run(["pulumi", "plugin", "install", "resource", name, version, "--file", str(binary)],
                       env=env, check=True, capture_output=True)
    return env


def test_a_stock_pulumi_installs_previews_serves_and_destroys_from_a_plain_shell(tmp_path):
    app = tmp_path / "app"
    scratch_copy(app)
    assert not (app / ".venv").exists()
    env = plain_shell(tmp_path)
    kube_plugin = Path(pulumi_env()["PULUMI_HOME"]) / "plugins" / "resource-kubernetes-v4.25.0"
    if kube_plugin.exists():     # what `pulumi install` would download on a machine with internet
        subprocess.run(["pulumi", "plugin", "install", "resource", "kubernetes", "4.25.0", "--file",
                        str(kube_plugin / "pulumi-resource-kubernetes")], env=env, check=True, capture_output=True)
    else:
        # no pulumi-kubernetes plugin here (scripts/k8s-toolchain builds it in about an hour) and no internet:
        # `pulumi install` would fail to download it; the Docker target does not load it, so the engine is
        # told not to download plugins, as an air-gapped user tells it
        env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] = "true"
    transcript: list[str] = []

    def pulumi(*args: str, stdin: str | None = None, timeout: int = 1500, check: bool = True):
        proc = subprocess.run(["pulumi", *args], cwd=app, env=env, input=stdin, capture_output=True, text=True,
                              timeout=timeout)
        transcript.append(f"$ pulumi {' '.join(args)}\n{proc.stdout}{proc.stderr}")
        if check and proc.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n"
                                 f"{proc.stderr[-3000:]}")
        return proc

    install = pulumi("install", *([] if kube_plugin.exists() else ["--no-plugins"]), timeout=900)
    assert (app / ".venv" / "bin" / "python").exists(), install.stdout[-2000:]
    name = f"stock-{secrets.token_hex(3)}"
    prefix = f"rvllm-{name}"
    src = tmp_path / "model"
    shutil.copytree(MODEL, src, ignore=shutil.ignore_patterns(".complete"))
    port = free_port()
    leftovers.record(name, prefix)       # a killed run's stack is the next run's to clean (scripts/test)
    pulumi("stack", "init", name)
    try:
        settings = {"environment": "test", "namePrefix": prefix, **s3_under_test.stack_settings(),
                    "rustfsPort": str(free_port()), "bindAddress": "127.0.0.1", "bucket": "stock-models",
                    "mountPath": f"/mnt/{prefix}", "mountCacheDir": str(tmp_path / "cache"),
                    "vllmImage": "rustfs-vllm/vllm-openai-cpu:0.30.0", "vllmReadyTimeout": "600",
                    "routerPort": str(free_ports(3))}     # the stack's one endpoint on ports of its own
        for key, value in settings.items():
            pulumi("config", "set", key, "--", value)
        # the models list lives in the stack file, as users keep it (docs/CONFIGURATION.md)
        import yaml
        path = app / f"Pulumi.{name}.yaml"
        data = yaml.safe_load(path.read_text()) or {}
        data.setdefault("config", {})["rustfs-vllm:models"] = [{
            "name": "smollm2", "source": str(src), "prefix": "smollm2", "port": port, "maxModelLen": 512,
            "kvCacheSpaceGib": 1, "extraArgs": ["--enforce-eager"]}]
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        pulumi("config", "set", "--secret", "rustfsAccessKey", stdin=f"stock-access-{secrets.token_hex(6)}")
        pulumi("config", "set", "--secret", "rustfsSecretKey", stdin=secrets.token_urlsafe(18))

        preview = pulumi("preview", "--non-interactive")
        assert "to create" in preview.stdout, preview.stdout[-3000:]
        pulumi("up", "--yes", "--skip-preview", "--non-interactive")
        outputs = json.loads(pulumi("stack", "output", "--json").stdout)
        assert outputs["smoke_completions"]["smollm2"].strip(), outputs

        from openai import OpenAI
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY")
        text = client.completions.create(model="smollm2", prompt="RustFS is", max_tokens=8).choices[0].text
        assert text.strip(), "an empty completion"
        assert pulumi("preview", "--expect-no-changes", "--non-interactive").returncode == 0

        # the program ran with the virtualenv Pulumi.yaml names, under the CLI's own language host
        about = json.loads(pulumi("about", "--json").stdout)
        assert about["runtime"]["executable"] == str(app / ".venv" / "bin" / "python"), about["runtime"]
        languages = [p for p in about["plugins"] if p["kind"] == "language"]
        host = subprocess.run([os.path.join(os.path.dirname(shutil.which("pulumi", path=env["PATH"])),
                                            "pulumi-language-python"), "-version"], capture_output=True, text=True)
        assert {"name": "python", "version": host.stdout.strip().lstrip("v"), "kind": "language"} in languages, about

        pulumi("destroy", "--run-program", "--yes", "--skip-preview", "--non-interactive")
        client_d = docker.from_env()
        assert not client_d.containers.list(all=True, filters={"label": f"rustfs-vllm.stack={name}"})
        with open("/proc/mounts") as fh:
            assert f"/mnt/{prefix}" not in fh.read()
        pulumi("stack", "rm", "--yes")
    finally:
        said = "\n".join(transcript)
        subprocess.run(["pulumi", "destroy", "--yes", "--skip-preview", "--non-interactive"], cwd=app, env=env,
                       capture_output=True, timeout=900)
        subprocess.run(["pulumi", "stack", "rm", "--yes", "--force"], cwd=app, env=env, capture_output=True)
        leftovers.remove_docker(name, (f"{prefix}-data",))
        remove_logs(name)                      # rclone's log, which destroy keeps (a service's logs are kept)
        leftovers.forget(name)
    assert "Traceback" not in said, said[-4000:]
    assert "ModuleNotFoundError" not in said
