# Keel: `make run` starts the server, `make test` runs the tests (both install and build first).
.PHONY: install build sdks run kafka-cluster example example-go example-python example-java example-rust test bench clean

NPM_STAMP := node_modules/.package-lock.json

install: $(NPM_STAMP)
$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NPM_STAMP)

build: install
	npm run build

# The server runs on whatever `node` is first on PATH (Node 20 works).
# MALLOC_ARENA_MAX: see README.md, "The store is the state".
run: build
	MALLOC_ARENA_MAX=$${MALLOC_ARENA_MAX:-2} node dist/main.js $(ARGS)

# Three Kafka brokers on 127.0.0.1:19092-19094 for a cluster by hand (README, "Run a cluster");
# the broker comes from Maven Central (test/kafka/install.sh, cached in ~/.cache/keel-kafka).
kafka-cluster: install
	npm exec -- node test/kafka/cluster.mjs

# The Greeter example needs Node >= 22: npm scripts put the pinned Node 24 first on PATH.
example: install
	npm exec -- node examples/greeter/greeter.mjs

# The SDK test services (test/sdks/*) and the Greeters (examples/greeter-*) in Go, Python, Java and
# Rust: each build.sh installs its SDK by package name into ~/.cache/keel-sdks (or SDK_BUILD_CACHE)
# and is a quick check once built; a missing toolchain fails with what to install.
sdks:
	@for f in test/sdks/*/build.sh examples/greeter-*/build.sh; do echo "building $$(dirname $$f)"; bash $$f || exit 1; done

# The Greeter in the other SDKs: each run.sh installs its SDK by package name (cached outside the
# clone), builds and serves on PORT (default 9080).
example-go example-python example-java example-rust: example-%:
	bash examples/greeter-$*/run.sh

# On a failure, the failing assertions again at the end, where a log's tail shows them (results of
# test files that no longer exist are removed first: they named failures that were not this run's).
test: build sdks
	rm -rf .tap/test-results
	npm test || { echo '== failed (details: .tap/test-results) =='; \
	  grep -rh -A14 '^ *not ok' .tap/test-results | head -n 120; \
	  grep -rn '^ *not ok' .tap/test-results | tail -n 20; exit 1; }

# Then the cluster cell (bench/cluster.mjs: one node, then three on three Kafka brokers); BENCH_CLUSTER=0 skips it.
# Then the cost of flow control (bench/flow.mjs: scoped under a rule that never binds against unscoped); BENCH_FLOW=0 skips it.
bench: build
	npm run bench
	[ "$${BENCH_CLUSTER:-1}" = 0 ] || npm run bench:cluster
	[ "$${BENCH_FLOW:-1}" = 0 ] || npm run bench:flow

clean:
	rm -rf dist keel-data .tap
