# crosszone: build, test and demo. Every target installs what it needs, idempotently.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
BUILD := build
BPF_SRC := src/crosszone/fastpath/bpf
BPF_HDRS := $(wildcard $(BPF_SRC)/*.h)
# -mcpu=v3: 32-bit jumps and ALU ops (kernel >= 5.1); the gateway object has ~10% fewer
# instructions than with clang 14's default v1 (llvm-objdump: 3180 lines against 3510).
BPF_CFLAGS := -O2 -g -target bpf -mcpu=v3 -Wall -Werror -I/usr/include/$(shell uname -m)-linux-gnu
APT_PKGS := clang llvm gcc linux-libc-dev libbpf-dev bpftool iproute2 nftables frr nginx-light etcd-server \
            etcd-client iputils-ping tcpdump libelf1 ethtool prometheus chromium chromium-driver
# systemd-analyze (package systemd): tests/unit/test_systemd_units.py verifies packaging/systemd/.
APT_PKGS += systemd
# The product's objects: what a gateway host loads (the gateway program; the XDP_PASS program of
# veth peers and of the live-frames probe). Building the wheel compiles these and packages them
# (setup.py, `make product-objects BUILD=DIR`); everything else here is for tests and the lab.
PRODUCT_OBJS := $(BUILD)/xdp_gateway.o $(BUILD)/xdp_pass.o
BPF_OBJS := $(BUILD)/xdp_gateway.o $(BUILD)/xdp_gateway_lpm.o $(BUILD)/xdp_floor.o \
            $(BUILD)/xdp_pass.o $(BUILD)/xdp_drop.o $(BUILD)/xdp_gateway_testclock.o
# The emulator's priority queues: a tc classifier by DSCP (bpf/tc_dscp_class.c, emulate/queues.py).
BPF_OBJS += $(BUILD)/tc_dscp_class.o
# Benchmark builds (bpf/bench_harness.h, bpf/bench_spread.h): never attached to a device.
# Each in two modes: the restore harness for plain test runs, and _live for live-frames runs.
BENCH_BASE := bench_gateway bench_gateway_lpm bench_gateway_spread bench_gateway_lpm_spread bench_floor \
              bench_floor_decap bench_floor_decap_lpm
# The gateway with the test clock (bpf/policy.h): what the traffic policy costs without the clock read.
BENCH_BASE += bench_gateway_testclock
# The floor plus one reading of a time source (bpf/xdp_floor.c): the traffic policy's ceiling.
BENCH_BASE += bench_floor_sink bench_floor_clock bench_floor_coarse bench_floor_jiffies
BENCH_OBJS := $(BENCH_BASE:%=$(BUILD)/%.o) $(BENCH_BASE:%=$(BUILD)/%_live.o)
# `crosszone bench forward`: its generator, validating sink and floor forward (bpf/bench_forward_*.c).
BENCH_OBJS += $(BUILD)/bench_forward_gen.o $(BUILD)/bench_forward_sink.o $(BUILD)/bench_forward_floor.o
# Its sender (AF_XDP, or AF_PACKET: crosszone_lab/bench/sender/cz_sender.c): no BPF test run needed.
BENCH_TOOLS := $(BUILD)/cz_sender

.PHONY: setup apt venv build product-objects wheel lint test test-unit demo bench clean

setup: $(BUILD)/.apt-stamp $(VENV)/.stamp

$(BUILD)/.apt-stamp:
	@mkdir -p $(BUILD)
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# frr and nginx may start system-wide services on install; the emulator runs its own copies.
	@touch $@

$(VENV)/.stamp: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null
	@$(PY) -m pip install -q -e '.[dev,lab]'
	@touch $@

build: setup $(BPF_OBJS) $(BENCH_OBJS) $(BENCH_TOOLS)

# No setup: the wheel's build runs this with clang and libbpf's headers already there.
product-objects: $(PRODUCT_OBJS)

# The one wheel, product and lab (`pip install crosszone` or `crosszone[lab]`), into dist/.
wheel: setup
	$(PY) -m pip wheel -q --no-deps -w dist .

$(BUILD)/cz_sender: src/crosszone_lab/bench/sender/cz_sender.c Makefile
	@mkdir -p $(BUILD)
	gcc -O2 -Wall -Wextra -Werror -o $@ $<

$(BUILD)/xdp_gateway.o: $(BPF_SRC)/xdp_gateway.c $(BPF_HDRS) Makefile
	@mkdir -p $(BUILD)
	clang $(BPF_CFLAGS) -c $< -o $@

# The variants include the product's xdp_gateway.c after the header they stand in (bpf/
# bench_lpm_route.h, bpf/test_clock.h): built by the pattern rule below, rebuilt when it changes.
$(BUILD)/xdp_gateway_lpm.o $(BUILD)/xdp_gateway_testclock.o: $(BPF_SRC)/xdp_gateway.c

# Benchmark variants, from the bench sources (bpf/bench_gateway.c wraps the product's body in the
# harness; bpf/xdp_floor.c): -DCZ_BENCH plus what each name says (lpm trie, spread destinations,
# live); the stem includes ".o", so the plain names match too.
BENCH_FLAGS = -DCZ_BENCH $(if $(findstring _lpm,$*),-DCZ_ROUTES_LPM_TRIE) \
              $(if $(findstring _spread,$*),-DCZ_BENCH_SPREAD=100000) \
              $(if $(findstring _live,$*),-DCZ_BENCH_LIVE) \
              $(if $(findstring _decap,$*),-DCZ_FLOOR_DECAP) \
              $(if $(findstring _testclock,$*),-DCZ_TEST_CLOCK) \
              $(if $(findstring _sink,$*),-DCZ_FLOOR_CLOCK=0) \
              $(if $(findstring _clock,$*),-DCZ_FLOOR_CLOCK=1) \
              $(if $(findstring _coarse,$*),-DCZ_FLOOR_CLOCK=2) \
              $(if $(findstring _jiffies,$*),-DCZ_FLOOR_CLOCK=3)

$(BUILD)/bench_gateway%: $(BPF_SRC)/bench_gateway.c $(BPF_HDRS) Makefile
	clang $(BPF_CFLAGS) $(BENCH_FLAGS) -c $< -o $@

$(BUILD)/bench_floor%: $(BPF_SRC)/xdp_floor.c $(BPF_HDRS) Makefile
	clang $(BPF_CFLAGS) $(BENCH_FLAGS) -c $< -o $@

$(BUILD)/%.o: $(BPF_SRC)/%.c $(BPF_HDRS) Makefile
	@mkdir -p $(BUILD)
	clang $(BPF_CFLAGS) -c $< -o $@

# ruff's rules and mypy's settings are in pyproject.toml; a finding fails the run before any
# test starts
lint: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy src

test: build lint
	$(PY) -m pytest -q tests

test-unit: setup
	$(PY) -m pytest -q -m unit tests

demo: build
	$(VENV)/bin/crosszone demo $(DEMO_ARGS)

bench: build
	$(VENV)/bin/crosszone bench fastpath --json

clean:
	rm -rf $(BUILD)
