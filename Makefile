# Corral: two commands on a fresh Debian/Ubuntu machine, as root:
#   make up     install what is missing, start everything, build the default base, print how to use it
#   make test   run the whole test suite (starts the servers it needs)
# While developing, as any user once the venv exists: make test-unit (no servers, no root), make lint, make check.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STATE ?= $(CURDIR)/.state
TEST_STATE ?= $(CURDIR)/.state-test
NODES ?= 2
# `make up` also builds (once per machine, cached under /var/cache/corral) and registers a Debian
# base with python3, pip and git; `make up UP_ARGS=` skips it.
UP_ARGS ?= --with-debian
APT_PACKAGES := python3 python3-venv python3-dev gcc redis-server rabbitmq-server crun catatonit erofs-utils busybox-static \
	debootstrap iproute2 postgresql docker-compose bubblewrap python3-seccomp fuse3 libfuse3-dev pkg-config \
	qemu-system-x86 qemu-utils kmod cpio lz4 libjansson-dev e2fsprogs nftables libnftables1 zstd skopeo umoci docker-registry \
	chromium chromium-driver
PACKAGES := -e libs/common -e libs/host -e services/api -e services/scheduler -e services/node-agent \
	-e services/image-service -e services/memory-manager -e clients/python
PYTEST_ARGS ?= -q -n 2 --dist loadgroup

.PHONY: up down deps venv guestkit judge test test-locked test-unit client client-check bench lint check clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $$missing; \
	fi

$(VENV)/.installed: requirements-dev.txt $(wildcard */*/pyproject.toml) clients/python/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q $(PACKAGES) -r requirements-dev.txt
	touch $@

venv: deps $(VENV)/.installed

# The VM guest kit (Debian cloud kernel + initramfs with busybox and the guest agent), built
# once per machine into /var/cache/corral/guestkit; a no-op when it is up to date.
guestkit: venv
	@$(PY) -m corral_node_agent guestkit build

# The fncall runtimes' root (Debian + the 14 languages' toolchains, /var/cache/corral/fncall/judge):
# minutes of debootstrap once per machine, a no-op when it is up to date. `make up` registers it
# as environment "judge", so fncall works right after it.
judge: venv
	@$(PY) scripts/build_fncall_runtime.py > /dev/null

up: venv guestkit judge
	@# $(STATE).json holds the API key and the internal token: 0600 before anything is written to it.
	@install -m 600 /dev/null $(STATE).json
	@$(PY) scripts/corral_platform.py up --state-dir $(STATE) --nodes $(NODES) $(UP_ARGS) > $(STATE).json
	@echo "== running examples/quickstart.py against it =="
	@CORRAL_URL=$$($(PY) -c 'import json,sys; print(json.load(open(sys.argv[1]))["api"])' $(STATE).json) \
	  CORRAL_API_KEY=$$(cat $(STATE)/api-key) $(PY) examples/quickstart.py
	@echo "== waiting for the fncall pools of every node =="
	@$(PY) scripts/corral_platform.py wait-fncall --state-dir $(STATE)
	@$(PY) scripts/print_welcome.py $(STATE).json

down:
	$(PY) scripts/corral_platform.py down --state-dir $(STATE)

test: venv guestkit
	@mkdir -p $(TEST_STATE)/servers && chmod 755 $(TEST_STATE)
	@# One run at a time per checkout: runs share the servers' ports and the e2e platform's.
	@flock -o $(TEST_STATE)/lock $(MAKE) --no-print-directory test-locked

test-locked:
	@# The suite's platform needs this host's capacity and node ids (node-1, node-2), which a
	@# running `make up` platform holds (docs/architecture.md, "Capacity"): stop it first.
	@if ls $(STATE)/run/*.pid >/dev/null 2>&1; then \
	  echo "== make test: stopping the platform make up started ($(STATE)): the tests need this host; make up starts it again =="; \
	  $(PY) scripts/corral_platform.py down --state-dir $(STATE); fi
	@scripts/servers.sh start $(TEST_STATE)/servers 26379 25672 > $(TEST_STATE).urls
	@scripts/servers.sh start-postgres $(TEST_STATE)/servers 26432 > $(TEST_STATE).pg
	@read redis amqp < $(TEST_STATE).urls; read pg < $(TEST_STATE).pg; \
	CORRAL_TEST_REDIS_URL=$$redis CORRAL_TEST_AMQP_URL=$$amqp CORRAL_TEST_RABBITMQ_HOME=$(TEST_STATE)/servers/rabbitmq \
	CORRAL_TEST_POSTGRES_URL=$$pg $(PY) -m pytest tests $(PYTEST_ARGS); rc=$$?; \
	scripts/servers.sh stop $(TEST_STATE)/servers; exit $$rc

# Unit tests only: no servers, no root, no apt, no guest kit; just the Python packages in the venv.
test-unit: $(VENV)/.installed
	$(PY) -m pytest tests/unit -q

client: venv
	$(PY) scripts/generate_client.py

client-check: venv
	$(PY) scripts/generate_client.py --check

bench: venv
	$(PY) bench/sandbox_lifecycle.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check libs services clients/python/corral scripts bench tests
	$(VENV)/bin/mypy

check: lint test-unit

clean: down
	rm -rf $(STATE) $(STATE).json $(TEST_STATE) $(TEST_STATE).urls $(TEST_STATE).pg
