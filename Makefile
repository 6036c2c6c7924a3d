# rustfs-vllm. The README's two commands are `scripts/up` (== make up) and `scripts/test` (== make test).
.PHONY: up test test-k8s test-rustfs bootstrap unit integration e2e bench bench-serve destroy images rustfs-image
up:
	scripts/up
test:
	scripts/test
test-rustfs:
	scripts/test-rustfs
test-k8s:
	scripts/test-k8s
bootstrap:
	scripts/bootstrap
images:
	scripts/build-images
rustfs-image:
	scripts/build-images && scripts/build-rustfs-image
unit:
	scripts/bootstrap >/dev/null && . scripts/env.sh && .venv/bin/python -m pytest -q tests/unit
integration:
	scripts/bootstrap >/dev/null && . scripts/env.sh && .venv/bin/python -m pytest -q tests/integration tests/toolchain
e2e:
	scripts/bootstrap >/dev/null && . scripts/env.sh && .venv/bin/python -m pytest -q tests/e2e
bench:
	scripts/bench $(BENCH_ARGS)
bench-serve:
	scripts/bench-serve $(BENCH_ARGS)
destroy:
	. scripts/env.sh && pulumi destroy --run-program --yes --stack $${STACK:-offline}
