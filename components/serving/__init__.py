"""The service: each model's vLLM container reading its mount, the readiness wait, the smoke
completion, and the entry points (nginx) over a model's hosts."""
