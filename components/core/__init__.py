"""The target-neutral core: the seam a target implements (target.py), the store every target shares
(store.py: credential check, bucket, uploads), the one plan (plan.py: the stack's root, its smoke
completions and the outputs every target has) and the output helpers (outputs.py)."""
