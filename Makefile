# rustfs-vllm. The README's two commands are `scripts/up` (== make up) and `scripts/test` (== make test).
.PHONY: up test bootstrap unit integration e2e bench destroy images
up:
	scripts/up
test:
	scripts/test
bootstrap:
	scripts/bootstrap
images:
	scripts/build-images
unit:
	scripts/bootstrap >/dev/null && . scripts/env.sh && python -m pytest -q tests/unit
integration:
	scripts/bootstrap >/dev/null && . scripts/env.sh && python -m pytest -q tests/integration tests/toolchain
e2e:
	scripts/bootstrap >/dev/null && . scripts/env.sh && python -m pytest -q tests/e2e
bench:
	scripts/bench $(BENCH_ARGS)
destroy:
	. scripts/env.sh && pulumi destroy --yes --stack $${STACK:-offline}
