"""rustfs-vllm: Pulumi component resources for a RustFS-backed vLLM serving stack."""
