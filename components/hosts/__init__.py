"""The serving hosts: this machine or one reached over SSH, as one type (types.py), and what the
program knows and puts there (ssh.py, host_tools.py, machine.py, docker_facts.py, procs.py)."""
from components.hosts.types import Host, LocalHost, SshHost, hosts_of

__all__ = ["Host", "LocalHost", "SshHost", "hosts_of"]
