"""Storage: StorageClass rustfs-vllm-local and 4 local PersistentVolumes of 20Gi on node a.

The cluster has no provisioner: StorageClass $SC (kubernetes.io/no-provisioner, WaitForFirstConsumer, Retain)
and $PV_COUNT `local` PersistentVolumes of $PV_SIZE each on node a, folders $STATE/nodes/a/volumes/pv-<i> (the
size is what the PV announces; nothing enforces it). Retain: a PV whose claim is deleted becomes Released and
keeps its data; it is not bound again until its claimRef is removed (kubectl patch pv NAME -p
'{"spec":{"claimRef":null}}') or it is deleted (the next `up` makes it again, over the same folder and data).
`down --purge` deletes the folders.
Checked: a StatefulSet's volumeClaimTemplate (10Gi, that class) bound a-local-1 and wrote; StatefulSet deleted:
the claim stayed Bound and its data stayed; re-created: the pod read the earlier data; runAsUser/fsGroup 10001:
the volume was group 10001, setgid, writable; claim deleted: the PV became Released with its data (free-volumes
empties it and makes it Available)."""
from __future__ import annotations

import os
import re

from . import shell as sh
from .config import PV_NODE, SC, Config
from .fsutil import rm_rf
from .output import die, note

STORAGE_CLASS = f"""apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {SC}}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
"""


def pv_dir(c: Config, i: int) -> str:
    return f"{c.state}/nodes/{PV_NODE}/volumes/pv-{i}"


def persistent_volume(c: Config, i: int) -> str:
    return f"""---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {PV_NODE}-local-{i}, labels: {{rustfs-vllm/local-volume: "true"}}}}
spec:
  capacity: {{storage: {c.pv_size}}}
  volumeMode: Filesystem
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {SC}
  local: {{path: {pv_dir(c, i)}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: kubernetes.io/hostname, operator: In, values: [{PV_NODE}]}}
"""


def storage_manifest(c: Config) -> str:
    """The StorageClass and the PVs, one YAML stream."""
    return STORAGE_CLASS + "".join(persistent_volume(c, i) for i in range(1, int(c.pv_count) + 1))


def storage_up(c: Config) -> None:
    for i in range(1, int(c.pv_count) + 1):
        folder = pv_dir(c, i)
        if not os.path.isdir(folder):
            os.makedirs(folder, exist_ok=True)
            os.chmod(os.path.dirname(folder), 0o755)
            os.chmod(folder, 0o755)
    sh.run([*c.kc, "apply", "-f", "-"], input=storage_manifest(c), stdout=sh.DEVNULL)
    pvs = sh.out([*c.kc, "get", "pv", "-l", "rustfs-vllm/local-volume=true", "-o",
                  "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}"])
    note(f"StorageClass {SC}; local PersistentVolumes: {pvs}")


def free_volumes(c: Config) -> None:
    """Every Released local PV (its claim deleted) is emptied and made Available again."""
    released = sh.out([*c.kc, "get", "pv", "-l", "rustfs-vllm/local-volume=true", "-o",
                       'jsonpath={range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\\n"}{end}'])
    count = 0
    for pv in released.split():
        _, folder = sh.capture([*c.kc, "get", "pv", pv, "-o", "jsonpath={.spec.local.path}"], check=True)
        if not re.fullmatch(re.escape(c.state) + r"/nodes/.*/volumes/pv-.*", folder, re.DOTALL):
            die(f"{pv}: unexpected path {folder}")
        for entry in os.listdir(folder):   # find DIR -mindepth 1 -delete
            rm_rf(os.path.join(folder, entry))
        os.chown(folder, 0, 0)
        os.chmod(folder, 0o755)
        sh.run([*c.kc, "patch", "pv", pv, "--type=json", "-p", '[{"op": "remove", "path": "/spec/claimRef"}]'],
               stdout=sh.DEVNULL)
        note(f"{pv}: emptied ({folder}), Available")
        count += 1
    if count == 0:
        note("no Released local PersistentVolume")
