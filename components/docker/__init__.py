"""The Docker target's resources: its S3 server container, each host's part (host_plan.py: mount
root, cache, image, per model its mount or copy and its vLLM container), the entry points (nginx),
its outputs and its preflight."""
