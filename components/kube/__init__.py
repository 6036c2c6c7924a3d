"""target kubernetes: the same stack declared with pulumi-kubernetes on a cluster (components.targets.kubernetes builds it from these)."""
