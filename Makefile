# vecroute: `make demo` (the main job) and `make test` (the whole suite) on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: all install lab demo test lint warm system-deps bench clean

all: test

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

install: $(STAMP)

# Oracles and peers from Debian: ministat checks `vecroute stat`; iproute2, ping,
# traceroute and iperf3 are the live tests' Linux hosts; tmux is the terminal that
# `vecroute top`'s live test reads; tcpdump reads the pcapng files of `ctl pcap`.
# BIRD 2 and FRR are the routing daemons the linux-cp tests peer with (tests/routing_peers.py
# runs its own instances in namespaces; FRR's daemons live in /usr/lib/frr, off PATH).
SYSTEM_TOOLS := ministat:ministat ip:iproute2 ping:iputils-ping traceroute:traceroute \
	iperf3:iperf3 setpriv:util-linux tcpdump:tcpdump tmux:tmux \
	bird:bird2 birdc:bird2 vtysh:frr /usr/lib/frr/bgpd:frr
# Services the packages enable on install: the tests never use them, so they are
# stopped and disabled (a no-op where policy-rc.d already kept them from starting).
PACKAGE_SERVICES := bird frr
system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do \
		command -v $${t%%:*} >/dev/null || missing="$$missing $${t#*:}"; done; \
	missing=$$(printf '%s\n' $$missing | sort -u | tr '\n' ' '); \
	if [ -n "$${missing% }" ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		for s in $(PACKAGE_SERVICES); do \
			if [ -d /run/systemd/system ]; then \
				systemctl disable --now -q $$s.service 2>/dev/null || true; \
			elif [ -x /etc/init.d/$$s ]; then \
				/etc/init.d/$$s stop >/dev/null 2>&1 || true; \
			fi; done; \
	fi

# The main job: a namespace lab with vecroute routing between two Linux hosts (root).
lab: $(STAMP) system-deps warm
	$(BIN)/vecroute lab

# Compile the numba kernels once, before the test workers start (they load the cache).
warm: $(STAMP)
	$(BIN)/python -m vecroute.warmup

demo: $(STAMP)
	$(BIN)/vecroute replay examples/demo.toml \
		--in eth0=examples/demo-eth0.pcap --in eth1=examples/demo-eth1.pcap \
		--out-dir demo-out --stats-json demo-out/stats.json

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples

test: $(STAMP) system-deps lint warm
	$(BIN)/pytest -n 2 -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench.forwarding
	$(BIN)/python -m bench.replay_rate

clean:
	rm -rf $(VENV) .numba-cache demo-out .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
