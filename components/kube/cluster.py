"""KubeCluster: the cluster as this stack sees it: a pulumi-kubernetes provider from the secret
kubeconfig, the namespace, and one Secret holding every key the pods need.

- The namespace is made when missing and kept by destroy (``retain_on_delete``): it holds RustFS's
  volume claim, and deleting a namespace deletes every claim in it.
- The Secret (``<prefix>-keys-<suffix>``, named by Pulumi) holds the S3 keys, the AWS credentials file
  the streamer reads, the rclone serve s3 stand-in's auth key and the vLLM API key. Pods read it by
  reference (``secretKeyRef``, secret volumes): no key is in a pod spec, an env value or ``kubectl get
  -o yaml`` of anything but the Secret. New keys make a new Secret (the provider replaces a Secret
  whose data changes), created before the old one goes: the pod templates name it, so the pods that
  read it roll (an update, shown by preview) and nothing is replaced, not the bucket, the uploads or a
  workload. With a fixed name the replacement would have to delete first, and Pulumi would then
  replace everything that depends on the Secret, every StatefulSet, DaemonSet and Deployment (tried on
  the test cluster).
- readKeys scoped: a second Secret (``<prefix>-read-keys-<suffix>``) holds the stack's read key (and the
  streamer's credentials file made of it, the vLLM API key and the CA): the rclone DaemonSets and the
  vLLM pods read that one (``reader=True``); the root keys' Secret is read by RustFS's pod only. With
  readKeys shared the readers read the one Secret, as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.kube.names import meta
from components.serving import streamer

ACCESS_KEY, SECRET_KEY = "access-key", "secret-key"
AWS_CREDENTIALS = "aws-credentials"
RCLONE_AUTH_KEY = "rclone-auth-key"
API_KEY = "vllm-api-key"
CA_FILE = "s3-ca.pem"


@dataclass
class KubeClusterArgs:
    stack: str
    kubeconfig: pulumi.Input[str]
    namespace: str
    name_prefix: str
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    api_key: pulumi.Input[str] = ""
    ca_bundle: str = ""                  # rustfsCaBundle's text goes into the Secret too (public, but one volume)
    store_node_label: str = ""           # kubeStoreNodeLabel: RustFS on those nodes, the serving pods elsewhere


class KubeCluster(pulumi.ComponentResource):
    namespace: pulumi.Output[str]

    def __init__(self, name: str, args: KubeClusterArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("rustfs-vllm:kube:KubeCluster", name, None, opts)
        self.stack, self.namespace_name = args.stack, args.namespace
        self.provider = k8s.Provider(f"{name}-provider", k8s.ProviderArgs(
            kubeconfig=pulumi.Output.secret(args.kubeconfig), enable_server_side_apply=True),
            pulumi.ResourceOptions(parent=self))
        self.on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.ns = k8s.core.v1.Namespace(f"{name}-namespace", k8s.core.v1.NamespaceInitArgs(
            metadata=meta(args.namespace, None, args.stack, "namespace")),
            pulumi.ResourceOptions(parent=self, provider=self.provider, retain_on_delete=True))
        self.namespace = self.ns.metadata.apply(lambda m: m.name)
        self.args = args
        self.ca = open(args.ca_bundle, encoding="utf-8").read() if args.ca_bundle else None
        # no metadata.name: Pulumi names it <prefix>-keys-<random>, a new one for new keys (see above)
        self.secret = self._secret(f"{args.name_prefix}-keys", "keys", args.access_key, args.secret_key, server=True)
        self.secret_name: pulumi.Output[str] = self.secret.metadata.apply(lambda m: m.name)
        self.reader_secret_name: pulumi.Output[str] = self.secret_name
        self.register_outputs({"namespace": self.namespace})

    def _secret(self, name: str, component: str, access_key: pulumi.Input[str], secret_key: pulumi.Input[str],
                server: bool) -> k8s.core.v1.Secret:
        ca = self.ca

        def data(keys: list[str]) -> dict[str, str]:
            out = {ACCESS_KEY: keys[0], SECRET_KEY: keys[1], AWS_CREDENTIALS: streamer.credentials(keys[0], keys[1])}
            if server:
                out[RCLONE_AUTH_KEY] = f'"{keys[0]},{keys[1]}"'
            if keys[2]:
                out[API_KEY] = keys[2]
            if ca is not None:
                out[CA_FILE] = ca
            return out
        return k8s.core.v1.Secret(name, k8s.core.v1.SecretInitArgs(
            metadata=meta(None, self.args.namespace, self.args.stack, component),
            type="Opaque",
            string_data=pulumi.Output.secret(pulumi.Output.all(access_key, secret_key, self.args.api_key).apply(data))),
            self.child(depends_on=[self.ns]))

    def use_read_keys(self, access_key: pulumi.Input[str], secret_key: pulumi.Input[str]) -> None:
        """readKeys scoped: the readers' Secret, holding the read key; readers (``reader=True``) use it."""
        self.reader_secret = self._secret(f"{self.args.name_prefix}-read-keys", "read-keys", access_key, secret_key,
                                          server=False)
        self.reader_secret_name = self.reader_secret.metadata.apply(lambda m: m.name)

    def child(self, parent: Optional[pulumi.Resource] = None, **kw: object) -> pulumi.ResourceOptions:
        """Options of a resource on this cluster, a child of ``parent`` (default: this component)."""
        return pulumi.ResourceOptions(parent=parent or self, provider=self.provider, **kw)  # type: ignore[arg-type]

    def secret_env(self, name: str, key: str, reader: bool = False) -> k8s.core.v1.EnvVarArgs:
        """An environment variable read from the stack's Secret (the pod spec holds only the reference);
        ``reader``: the readers' Secret (the read key)."""
        return k8s.core.v1.EnvVarArgs(name=name, value_from=k8s.core.v1.EnvVarSourceArgs(
            secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(
                name=self.reader_secret_name if reader else self.secret_name, key=key)))

    def secret_volume(self, volume: str, items: dict[str, str], reader: bool = False) -> k8s.core.v1.VolumeArgs:
        """The Secret's ``items`` (key -> file name) as a read-only volume (``reader``: the readers' Secret)."""
        return k8s.core.v1.VolumeArgs(name=volume, secret=k8s.core.v1.SecretVolumeSourceArgs(
            secret_name=self.reader_secret_name if reader else self.secret_name, default_mode=0o444,
            items=[k8s.core.v1.KeyToPathArgs(key=k, path=p) for k, p in items.items()]))
