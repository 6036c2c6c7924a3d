"""scripts/k8s-cluster: a Kubernetes control plane on this machine's loopback, for the Kubernetes target's tests
(issue 20): etcd, kube-apiserver, kube-controller-manager and kube-scheduler as background processes, from the
binaries scripts/k8s-toolchain builds (and runs when missing), and two nodes, a and b, each a network namespace
(rvk8s-<n>) plus a mount namespace of its own running containerd (the Debian package), kubelet and kube-proxy;
an image registry; local PersistentVolumes. The verbs: see the launcher, scripts/k8s-cluster.

Why here, in scripts/: this is test infrastructure, run by scripts/test-k8s (make test-k8s) and by the tests of
tests/k8s (stop-node, free-volumes, up), before and apart from the program: nothing in components/ or
__main__.py imports it, and it is no part of what a Pulumi stack deploys. It uses the standard library only (it
may run before the venv exists, under whichever python3 is first on PATH). It was a bash script until issue 30
(item 3): every external command it runs (ip, nsenter, unshare, setsid, mount in the holder, iptables, openssl,
curl, ctr, docker, kubectl, tar, du, apt-get, the binaries with their flags) is the bash's, in the same order, with
the same arguments and files; what the bash did with coreutils on text and files (cat, cp, mv, rm, mkdir, chmod,
chown, readlink, stat, sha256sum, base64, grep, sed, awk, tail, find, python3 -c json) is done here in Python.

One job per module:
  config         paths, ports and constants from the environment (the ``${VAR:-default}`` of the bash)
  output         ``==> step`` lines, notes, ``k8s-cluster: error: ...``, tail/elapsed/date helpers
  shell          running commands: foreground (set -e made explicit), captured, streamed, in the background
  fsutil         rm -f, rm -rf, ``[ -s ]`` and put (write a file only when its content changes)
  procs          the processes by name: binary, pid file, alive-and-ours check, stop
  pki            certificates (openssl) and kubeconfigs
  control_plane  the control plane's flags (args_of), health checks, start, wait
  network        bridge, veths, network namespaces, routes, the iptables rule
  cgroups        the nodes' cgroup folders and what is left in them
  node_files     each node's configuration files and the pause image archive
  node           holder (mount namespace), containerd, kubelet, kube-proxy: up and down
  registry       the image registry (docker-registry over TLS) and the docker.io name mapping (repo_of)
  images         load-image (push once, pull into every node, drop the layers), import-image
  storage        the StorageClass and local PersistentVolumes, free-volumes
  cli            the verbs and main()
"""
