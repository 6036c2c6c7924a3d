"""The bucket on the serving host: the mount root, each model's read-only rclone FUSE mount and
the VFS cache (mounts.py, as Pulumi resources), run by the one mount implementation (mount_tool.py,
standard-library Python, shipped to remote hosts)."""
