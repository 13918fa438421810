# Baton: `make run` starts a single node on 127.0.0.1:7878 (data in ./baton-data);
# `make test` runs every test. Both install what they need first.

# One target directory outside the clone, shared by runs and CI: the dependency
# stack (RocksDB's C++ above all) is built once.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/baton-target
CARGO ?= cargo

.PHONY: setup run cluster build release test test-rust test-openraft test-openapi test-image test-chart test-ui test-clients test-cli test-fuzz openapi lint fmt clean-data chaos test-chaos fresh-check

setup:
	@.ci/setup

# The same build as the tests (workspace, every target): a `-p` or `--release`
# build would compile RocksDB again (see ARCHITECTURE.md). Dependencies are
# optimised in this profile; `make release` builds the fully optimised binary.
build: setup
	$(CARGO) build --workspace --all-targets

run: build
	$(CARGO_TARGET_DIR)/debug/baton serve

# Three nodes on 127.0.0.1 (API 7878/7888/7898), data in a temporary directory;
# Ctrl-C stops them and removes the data.
cluster: build
	$(CARGO_TARGET_DIR)/debug/baton dev cluster

release: setup
	$(CARGO) build --release --workspace

test: setup test-rust test-openraft test-openapi test-image test-chart test-ui test-clients test-cli test-fuzz test-loadtest test-overload test-chaos

test-rust:
	$(CARGO) nextest run --workspace --no-fail-fast

# The vendored openraft's own unit tests (its engine, progress and replication
# state; under 2 s once built). Baton patches that code (ARCHITECTURE.md, "Why
# openraft 0.9.25"), and the workspace excludes vendor/, so test-rust does not
# run them. vendor/openraft/Cargo.lock pins what they build with.
test-openraft:
	$(CARGO) test --locked --lib --manifest-path vendor/openraft/Cargo.toml

# Validates the committed OpenAPI document (the Rust tests check it matches the code)
# with openapi-spec-validator and with openapi-generator's own validator, which the
# Go and Java client generators run first (it runs on the machine's JDK).
test-openapi:
	@.ci/setup python
	.venv/bin/openapi-spec-validator openapi/baton.json
	.venv/bin/openapi-generator-cli validate -i openapi/baton.json
	@echo "openapi: 2 passed, 0 failed"

# Lints the Dockerfile (hadolint, from the pinned Python tools). No container
# engine runs here: .ci/fresh-check runs the Dockerfile's recipe in clean roots.
test-image:
	@.ci/setup python
	.venv/bin/hadolint Dockerfile
	@echo "hadolint: 1 passed, 0 failed"

# The Helm chart (helm/baton): lint and render with Helm's own library, validate
# every manifest against Kubernetes' schemas, and run the rendered voters and
# sidecar as real processes on loopback (helm/tests).
test-chart: build
	@.ci/setup python
	BATON_BIN=$(CARGO_TARGET_DIR)/debug/baton .venv/bin/pytest -q helm/tests

# /ui and /docs in headless Chromium (Debian's, installed by .ci/setup browser)
# against a real node: live updates, reconnect after a restart, the docs' examples.
# UI_SHOTS_DIR=/some/dir also saves screenshots at desktop and phone width.
test-ui: build
	@.ci/setup python
	@.ci/setup browser
	BATON_BIN=$(CARGO_TARGET_DIR)/debug/baton .venv/bin/pytest -q service/api/tests/browser

# The client commands (`baton lock`, `baton elect`, `baton locks|names|leases|...`,
# `baton watch`, `baton cluster status`; issue 15) as real processes against a real
# node: fencing tokens, no overlap, loss while stopped, signals, exit codes, output.
test-cli: build
	@.ci/setup python
	BATON_BIN=$(CARGO_TARGET_DIR)/debug/baton .venv/bin/pytest -q service/server/tests/cli

# Generated clients (issue 15): Python (openapi-python-client) and TypeScript
# (openapi-typescript + openapi-fetch, type-checked by `tsc --noEmit`), generated
# from the committed openapi/baton.json into a temporary folder, each running the
# flows of openapi/clients/ against a real node.
test-clients: build
	@.ci/setup python
	@.ci/setup node
	BATON_BIN=$(CARGO_TARGET_DIR)/debug/baton .venv/bin/pytest -q openapi/clients

# Fuzzing from the spec (issue 16): schemathesis on the committed openapi/baton.json
# against real nodes with auth on: every phase (stateful ones following the spec's
# links) and every check, seed 7, a bounded number of examples per operation
# (about 2 minutes on 2 cores). BATON_FUZZ_REPORT_DIR=/some/dir keeps the
# reports and the node logs.
test-fuzz: build
	@.ci/setup python
	BATON_BIN=$(CARGO_TARGET_DIR)/debug/baton .venv/bin/pytest -q service/api/tests/schemathesis

# The README's commands on a fresh machine: a clean Debian root (debootstrap),
# `make run`, then `make test` with that server up, then the Dockerfile's recipe.
# Needs root and about an hour (cold builds); run it when .ci/setup changes.
fresh-check:
	.ci/fresh-check

# Regenerates the committed OpenAPI document from the code.
openapi:
	$(CARGO) run -q -p baton -- openapi > openapi/baton.json

# Clippy runs as the compiler of a normal build (what `cargo clippy` does under a
# check): a check would compile RocksDB's C++ a second time for its own artefacts.
CLIPPY_DRIVER ?= $(shell rustc --print sysroot)/bin/clippy-driver
# baton-core's own clippy.toml forbids clocks, sleeps, threads, files, sockets and
# processes in its code; the tree check keeps async runtimes, network and storage
# crates out of its dependencies. cargo-machete finds dependencies nothing uses.
CORE_FORBIDDEN_DEPS = ^(tokio|mio|async-std|futures|reqwest|hyper|actix-web|actix-rt|openraft|rocksdb|librocksdb-sys|socket2) v
lint: setup
	$(CARGO) fmt --all -- --check
	CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" RUSTC_WORKSPACE_WRAPPER=$(CLIPPY_DRIVER) \
		$(CARGO) build --workspace --all-targets
	@if $(CARGO) tree -p baton-core -e normal --prefix none | grep -E '$(CORE_FORBIDDEN_DEPS)'; then \
		echo "lint: baton-core must stay pure (no runtime, network or storage crate)" >&2; exit 1; fi
	@.ci/setup lint
	$(CARGO) machete

fmt:
	$(CARGO) fmt --all

clean-data:
	rm -rf ./baton-data

# Fault injection (issue 7, RELIABILITY.md): a cluster of real `baton` processes
# under kill -9, SIGSTOP, raft-link partitions and clock jumps, with the safety
# checkers run over the recorded history. Output (history, report, node logs)
# goes to chaos-out/. Binaries come from the workspace build above.
CHAOS_BIN = $(CARGO_TARGET_DIR)/debug/baton-chaos
BATON_BIN = $(CARGO_TARGET_DIR)/debug/baton
CHAOS_SEED ?= 1

# 5 minutes, 5 nodes, every fault family.
chaos: build
	@.ci/setup chaos
	$(CHAOS_BIN) run --nodes 5 --duration-s 300 --seed $(CHAOS_SEED) --faults kill,pause,partition,clock \
		--baton-bin $(BATON_BIN) --out chaos-out/chaos-$(CHAOS_SEED)

# 60-second smoke on 3 nodes, then two short negative controls that must be caught
# (--expect-violation=CHECKERS exits 0 only if those checkers failed): workers that
# skip fencing, and servers that acknowledge before anything is durable (--unsafe-no-fsync; seed 5
# schedules its first kill-all 7 s in).
test-chaos: build
	@.ci/setup chaos
	$(CHAOS_BIN) run --nodes 3 --duration-s 60 --seed $(CHAOS_SEED) --faults kill,pause,partition \
		--baton-bin $(BATON_BIN) --out chaos-out/smoke-$(CHAOS_SEED)
	$(CHAOS_BIN) run --nodes 3 --duration-s 30 --seed $(CHAOS_SEED) --faults pause --unsafe-skip-fencing \
		--expect-violation=fenced-register --baton-bin $(BATON_BIN) --out chaos-out/control-skip-fencing-$(CHAOS_SEED)
	$(CHAOS_BIN) run --nodes 3 --duration-s 30 --seed 5 --faults kill --unsafe-no-fsync \
		--expect-violation=tokens-unique --baton-bin $(BATON_BIN) --out chaos-out/control-no-fsync

# Baton side by side with etcd (issue 6): installs etcd when missing, starts one etcd
# and one Baton (fsync on, loopback, free ports, temporary data), runs the shared
# scenarios against each in alternation and writes BENCHMARKS.md (raw reports and
# charts in loadtest/results/). BENCH_ARGS adds options, e.g. BENCH_ARGS="--rounds 3".
.PHONY: bench bench-memory bench-cluster bench-scale bench-storm bench-snapshot-cluster bench-shared test-loadtest test-overload
BENCH_ARGS ?=
# Benchmarks run the release build, the one the image ships: side by side with the
# dev profile it uses about 11 % less CPU per lock cycle (BENCHMARKS.md, "Which build
# the image and the benchmarks use"). The first `make release` compiles RocksDB once
# more (about 25 min).
BENCH_BIN := $(CARGO_TARGET_DIR)/release
bench: release
	@.ci/setup etcd
	$(BENCH_BIN)/baton-loadtest bench --baton-bin $(BENCH_BIN)/baton \
		--etcd-bin $$(command -v etcd) --out BENCHMARKS.md --results-dir loadtest/results $(BENCH_ARGS)

# RSS per held lock (1,000,000 held) and the restart time after kill -9: the
# "Memory and restart" section of BENCHMARKS.md (bench keeps it when it reruns).
bench-memory: release
	$(BENCH_BIN)/baton-loadtest memory --baton-bin $(BENCH_BIN)/baton \
		--markdown BENCHMARKS.md --report loadtest/results/memory.json $(BENCH_ARGS)

# Issue 19: lock-cycle throughput and p99 with 0, 1,000, 100,000 and 1,000,000 other
# locks held (each on its own lease), snapshots built during the runs: the "Cost as
# the state grows" section of BENCHMARKS.md and loadtest/results/scale.svg. Three
# rounds, the levels taking turns, medians reported: one run's p99 at a million held
# moves by about 10 % from the next (about 9 minutes in all).
bench-scale: release
	$(BENCH_BIN)/baton-loadtest scale --baton-bin $(BENCH_BIN)/baton --rounds 3 \
		--markdown BENCHMARKS.md --report loadtest/results/scale.json \
		--plot loadtest/results/scale.svg $(BENCH_ARGS)

# Issue 19: 100,000 leases holding 1,000,000 locks expire together while 64 clients run
# lock cycles: the "Expiry storm" section of BENCHMARKS.md.
bench-storm: release
	$(BENCH_BIN)/baton-loadtest storm --baton-bin $(BENCH_BIN)/baton \
		--markdown BENCHMARKS.md --report loadtest/results/storm.json $(BENCH_ARGS)

# 3-member etcd vs 3-node Baton (lock-cycle, lock-contended against each leader): the
# "3-node" section of BENCHMARKS.md.
bench-cluster: release
	@.ci/setup etcd
	$(BENCH_BIN)/baton-loadtest cluster --baton-bin $(BENCH_BIN)/baton \
		--etcd-bin $$(command -v etcd) --out BENCHMARKS.md --results-dir loadtest/results $(BENCH_ARGS)

# Issue 19: a 3-node cluster builds snapshots of 1,000,000 held locks and a restarted
# follower installs one while lock-cycle runs: heartbeat gaps on each follower and
# whether an election happened, the "Snapshots in a 3-node cluster" section.
bench-snapshot-cluster: release
	$(BENCH_BIN)/baton-loadtest snapshot-cluster --baton-bin $(BENCH_BIN)/baton \
		--markdown BENCHMARKS.md --report loadtest/results/snapshot-cluster.json $(BENCH_ARGS)

# Issue 17: readers-writers (64 clients, 10 % writers) and a semaphore of 8 under 64
# clients, Baton vs etcd's client-side recipes (RWMutex, a semaphore on the same
# pattern), with lock-cycle for reference, alternating targets in one run: the
# "shared" section of BENCHMARKS.md (`make bench` keeps it).
bench-shared: release
	@.ci/setup etcd
	$(BENCH_BIN)/baton-loadtest bench --baton-bin $(BENCH_BIN)/baton \
		--etcd-bin $$(command -v etcd) --out BENCHMARKS.md --results-dir loadtest/results \
		--scenarios lock-cycle,readers-writers,semaphore --section shared $(BENCH_ARGS)

# Issue 16's admission promises under an open-loop load at twice a node's
# capacity (bounded latency, flat memory, nothing refused applied, recovery).
# Structural checks, not speed: the bounds are the propose timeout and growth.
test-overload: build
	$(CARGO_TARGET_DIR)/debug/baton-loadtest overload --baton-bin $(CARGO_TARGET_DIR)/debug/baton

# A few seconds of every load-test scenario against a fresh Baton and a fresh etcd:
# checks the tool works end to end and its reports are well-formed (not a speed test).
test-loadtest: build
	@.ci/setup etcd
	$(CARGO_TARGET_DIR)/debug/baton-loadtest smoke --baton-bin $(CARGO_TARGET_DIR)/debug/baton \
		--etcd-bin $$(command -v etcd) --require-watch
