# vgpu.isolation: the two commands are `make site` (provision the nodes of the inventory) and
# `make test` (the complete offline test suite). Every target does its own set-up.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# Recipes run without being echoed; V=1 shows each command as it runs.
ifneq ($(V),1)
.SILENT:
endif

VENV        ?= .venv
# The small virtualenv of the operator's targets (site, verify, stack, upgrade, uninstall, image):
# requirements-site.txt, not the test tool chain. Those targets run make again with
# TOOLS_VENV=$(SITE_VENV); everything else runs on the development virtualenv.
SITE_VENV   ?= .venv-site
TOOLS_VENV  ?= $(VENV)
PY          := $(TOOLS_VENV)/bin/python
BIN         := $(TOOLS_VENV)/bin
INVENTORY   ?= inventory/hosts.yml
PLAYBOOK    ?= playbooks/site.yml
COLLECTIONS := .collections
COLL_DIR    := $(COLLECTIONS)/ansible_collections/vgpu/isolation
SANITY_DIR  := build/ansible_collections/vgpu/isolation
CACHE_DIR   ?= $(HOME)/.cache/vgpu-isolation
VERSION     := $(shell sed -n 's/^version: *//p' galaxy.yml)
# The offline bundle the inventory names (a literal vgpu_offline_bundle_dir in it or in its
# group_vars/host_vars): its site/wheels build the site virtualenv and give the dependency
# collections, and it brings the component image. BUNDLE=DIR says it on the command line.
# false when the inventory has the nodes pull the component image from a registry
# (vgpu_component_image_import: false); IMAGE_IMPORT=false says it on the command line.
ifeq ($(origin BUNDLE),undefined)
BUNDLE := $(shell python3 files/site/inventory_setting.py $(INVENTORY) vgpu_offline_bundle_dir)
$(if $(filter 0,$(.SHELLSTATUS)),,$(error the offline bundle of $(INVENTORY): see above))
else ifneq ($(BUNDLE),)
$(if $(wildcard $(BUNDLE)/site/wheels),,$(error BUNDLE=$(BUNDLE) is no offline bundle on this machine (it has no site/wheels): build one with `make bundle` on a connected Debian 12 machine and copy its build/bundle here, or leave BUNDLE out on a connected machine))
endif
ifeq ($(origin IMAGE_IMPORT),undefined)
IMAGE_IMPORT := $(shell python3 files/site/inventory_setting.py $(INVENTORY) vgpu_component_image_import)
$(if $(filter 0,$(.SHELLSTATUS)),,$(error vgpu_component_image_import of $(INVENTORY) could not be read (above)))
endif
IMAGE_TARBALL := build/images/vgpu-components-$(VERSION).tar
# The collections we depend on (galaxy.yml: kubernetes.core, community.general, community.crypto, ansible.posix)
# and those molecule's docker driver needs (community.docker, ansible.posix) come from this pinned
# PyPI release of the Ansible community package: Galaxy is not reachable from our machines.
ANSIBLE_COMMUNITY := ansible==12.3.0
COMMUNITY_WHEEL = $(if $(BUNDLE),$(BUNDLE)/site/wheels,$(CACHE_DIR)/wheels)/$(subst ==,-,$(ANSIBLE_COMMUNITY))-py3-none-any.whl
DEP_COLLECTIONS := community/docker ansible/posix community/general community/crypto kubernetes/core
DEP_COLL_STAMPS := $(foreach c,$(DEP_COLLECTIONS),$(COLLECTIONS)/ansible_collections/$(c)/MANIFEST.json)
# Tests run the collection from the project-local path, never from ~/.ansible.
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(COLLECTIONS)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(abspath $(BIN)):$(PATH)
export VGPU_CACHE_DIR := $(CACHE_DIR)

MOLECULE_JOBS ?= 2
# pytest workers of make unit.
UNIT_JOBS ?= 2
# 1: make e2e-node also runs upgrade.yml and stack.yml on its cluster (make e2e-node-day2).
E2E_NODE_DAY2 ?= 0
# A release (git revision) that provisions the e2e node before this tree upgrades it (make e2e-node-upgrade).
E2E_NODE_UPGRADE_FROM ?=
# What `make bundle` waits for when make runs targets side by side (make test: images).
BUNDLE_AFTER ?=
# 1: make e2e-site goes on with day two: a fresh worker joins, another leaves (make e2e-site-day2).
E2E_SITE_DAY2 ?= 0
# extender, or dra: the node provisioned with vgpu_scheduling dra and tested with claims (make e2e-node-dra).
E2E_NODE_SCHEDULING ?= extender
# The release make e2e-node-upgrade provisions with before upgrading: the last commit before the
# settings contract (issue 39), whose inventories name settings vgpu_stack_*.
E2E_UPGRADE_FROM ?= 2730ea1
# Scenarios `make test` leaves out: nvidia_driver_535's second DKMS build takes about 8 minutes of
# both cores (its packages' resolution is checked by the nvidia_driver scenario). Run it with
# make molecule MOLECULE_SCENARIOS=nvidia_driver_535.
MOLECULE_OPT_IN := nvidia_driver_535
MOLECULE_ALL := $(filter-out $(MOLECULE_OPT_IN),$(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))))
# The lanes take scenarios from one queue in this order: the long ones first (in the cold make test
# of 2026-12-03, nvidia_driver 17 minutes with its DKMS build, k3s_config 10, vgpu_interposer 4),
# so the short ones (1 to 2 minutes each) fill in at the end and the lanes finish together.
MOLECULE_LONG := nvidia_driver k3s_config vgpu_interposer
MOLECULE_SCENARIOS ?= $(foreach s,$(MOLECULE_LONG),$(filter $(s),$(MOLECULE_ALL))) $(filter-out $(MOLECULE_LONG),$(MOLECULE_ALL))
PY_SOURCES := plugins roles files/components files/site tests bench molecule contract
# Debian packages the tests run: sanity's shellcheck, the image builds, the C toolchain.
HOST_PACKAGES := shellcheck debootstrap gcc make libc6-dev binutils git rsync dpkg-dev containerd

# `make help`: the operator's targets first (README.md, docs/first-run.md), then the developer's.
HELP_OPERATOR := check site verify stack upgrade uninstall image bundle
.PHONY: help
help: ## list the targets
	grep -hE '^[a-z][a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' -v operator="$(HELP_OPERATOR)" ' \
	    BEGIN { n = split(operator, order, " "); for (i = 1; i <= n; i++) rank[order[i]] = i } \
	    { line = sprintf("  %-18s %s", $$1, $$2); if ($$1 in rank) op[rank[$$1]] = line; else dev[++d] = line } \
	    END { print "Operating a site (INVENTORY=path/to/hosts.yml; V=1 shows each command):"; \
	          for (i = 1; i <= n; i++) if (i in op) print op[i]; \
	          print "Developing vgpu.isolation (docs/testing.md):"; for (i = 1; i <= d; i++) print dev[i] }'

# --- set-up -------------------------------------------------------------------------------
$(VENV)/.stamp: requirements-dev.txt
	@echo ">> creating the Python environment in $(VENV)"
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-deps -r requirements-dev.txt
	touch $@

# The components' package, installed editable into the development venv: the tests and the benches
# import it as the image does (vgpu_components), from files/components/src.
$(VENV)/.components.stamp: files/components/pyproject.toml | $(VENV)/.stamp
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e files/components
	touch $@

$(SITE_VENV)/.stamp: requirements-site.txt
	files/site/venv.sh $(SITE_VENV) requirements-site.txt $(if $(BUNDLE),$(BUNDLE)/site/wheels)
	touch $@

.PHONY: venv
venv: $(TOOLS_VENV)/.stamp ## the locked Python tool chain (make site: the small site virtualenv)

.PHONY: host-packages
host-packages: ## the Debian packages the tests need (installed only when missing)
	tests/harness/ensure-debian-packages.sh $(HOST_PACKAGES)

.PHONY: lock
lock: ## re-resolve requirements-dev.in into requirements-dev.txt (and its subsets: the site's, the image's)
	rm -rf build/lock-venv && python3 -m venv build/lock-venv
	build/lock-venv/bin/pip install --quiet -r requirements-dev.in
	build/lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==' | sort -f > requirements-dev.txt
	build/lock-venv/bin/pip install --quiet packaging
	build/lock-venv/bin/python tests/harness/lock_subset.py requirements-site.in requirements-dev.txt requirements-site.txt
	build/lock-venv/bin/python tests/harness/lock_subset.py files/components/pyproject.toml requirements-dev.txt files/components/image/requirements.txt

$(COLLECTIONS)/ansible_collections/%/MANIFEST.json: | $(TOOLS_VENV)/.stamp
	@echo ">> $* from $(ANSIBLE_COMMUNITY)$(if $(BUNDLE), (the offline bundle's))"
	$(if $(BUNDLE),,$(BIN)/pip download --quiet --no-deps --dest $(CACHE_DIR)/wheels "$(ANSIBLE_COMMUNITY)")
	$(PY) tests/harness/extract_collection.py $(COMMUNITY_WHEEL) $* $(COLLECTIONS)

.PHONY: collection
collection: venv $(DEP_COLL_STAMPS) ## build the collection tarball and install it into .collections
	# Build from the files git knows (tracked, or new and not ignored): never caches or outputs.
	tests/harness/copy-tree.sh build/src
	mkdir -p $(COLLECTIONS)
	$(BIN)/ansible-galaxy collection build --force --output-path build build/src >/dev/null
	$(BIN)/ansible-galaxy collection install --force --offline -p $(COLLECTIONS) \
	    build/vgpu-isolation-$(VERSION).tar.gz >/dev/null
	@echo ">> vgpu.isolation $(VERSION) installed in $(COLLECTIONS)"

# --- the main job ---------------------------------------------------------------------------
# The operator's targets run on the site virtualenv: make calls itself with TOOLS_VENV set.
OPERATOR_TARGETS := site check verify stack upgrade uninstall image
.PHONY: $(OPERATOR_TARGETS)
ifneq ($(TOOLS_VENV),$(SITE_VENV))
$(OPERATOR_TARGETS):
	@$(MAKE) --no-print-directory TOOLS_VENV=$(SITE_VENV) BUNDLE="$(BUNDLE)" IMAGE_IMPORT="$(IMAGE_IMPORT)" $@
else
site: collection site-image ## provision the inventory's nodes (default: this machine); checks the settings first, then builds the component image when missing
	$(BIN)/ansible-playbook -i $(INVENTORY) $(PLAYBOOK) $(ARGS)

check: settings-check ## check the inventory and every host's settings; needs no reachable host, changes nothing

# make check, and site, stack and upgrade before the component image is built (root, debootstrap,
# minutes) or any package installed: the inventory's YAML (file and line of an error), then the
# settings check (seconds); the playbook then checks again, as it always does.
.PHONY: settings-check
settings-check: collection
	$(PY) files/site/inventory_yaml.py $(INVENTORY)
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/check.yml $(ARGS)

verify: collection ## verify the inventory's nodes
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/verify.yml $(ARGS)

stack: collection site-image ## add the GPU stack to the inventory's existing cluster (kubespray, k3s-ansible, kubeadm)
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/stack.yml $(ARGS)

upgrade: collection site-image ## bring the inventory's site to this version and its settings, node by node
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/upgrade.yml $(ARGS)

uninstall: collection ## remove the stack (ARGS='-e vgpu_uninstall_cluster=true -e vgpu_uninstall_driver=true' for more)
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/uninstall.yml $(ARGS)

image: venv ## the component image, an OCI archive: build/images/vgpu-components-<version>.tar (no Docker needed)
	PYTHON=$(abspath $(PY)) files/components/image/build.sh
endif

# The component image site.yml imports: the offline bundle's, else build/images' (built here when
# missing, which needs root and debootstrap), unless the nodes pull it from a registry.
.PHONY: site-image
site-image: venv settings-check
	@if [[ -n "$(BUNDLE)" ]]; then echo ">> the component image comes from the offline bundle $(BUNDLE)"; \
	elif [[ "$(IMAGE_IMPORT)" =~ ^([Ff]alse|[Nn]o|0)$$ ]]; then echo ">> the nodes pull the component image from its registry"; \
	elif [[ -s $(IMAGE_TARBALL) ]]; then echo ">> the component image: $(IMAGE_TARBALL)"; \
	else echo ">> $(IMAGE_TARBALL) is missing: building it (a few minutes the first time)"; \
	    PYTHON=$(abspath $(PY)) files/components/image/build.sh; fi

.PHONY: bundle
bundle: collection host-packages | $(BUNDLE_AFTER) ## the offline bundle of a kubeadm site in build/bundle (BUNDLE_PARTS adds driver)
	tests/harness/ensure-docker.sh
	files/bundle/build.sh build/bundle

# --- tests ----------------------------------------------------------------------------------
.PHONY: test
test: host-packages prebuild venv lint sanity unit security ## the complete offline test suite
	@# The later layers run side by side, each as soon as what it needs is built: they mostly wait on
	@# debootstrap, apt, dpkg and kubelet in their containers, and one at a time left a core idle.
	@# libvgpu's tests and the control-plane e2e run while the images build; molecule (two lanes)
	@# and the e2e node once the images are there.
	@# The bundle waits for the images: both debootstrap into one .deb cache and build the component image.
	$(MAKE) -j4 libvgpu-test e2e molecule e2e-node BUNDLE_AFTER=images
	@echo ">> make test: all layers passed"

.PHONY: prebuild
prebuild: ## start the Go builds of the upstream binaries in the background (make test: they use the idle core)
	tests/harness/prebuild.sh

.PHONY: generate
generate: venv ## write every file generated from the contract (contract/contract.yml)
	$(PY) contract/generate.py

.PHONY: lint
lint: venv $(VENV)/.components.stamp collection ## ruff, mypy, ansible-lint (production profile), generated files fresh
	@echo ">> generated files (contract/generate.py --check: each equal to a fresh generation)"
	$(PY) contract/generate.py --check
	@echo ">> ruff"
	$(BIN)/ruff check $(PY_SOURCES)
	$(BIN)/ruff format --check $(PY_SOURCES)
	@echo ">> mypy"
	$(BIN)/mypy
	@echo ">> ansible-lint"
	$(BIN)/ansible-lint --offline --profile production
	@echo ">> changelog fragments"
	$(BIN)/antsibull-changelog lint

.PHONY: sanity
sanity: venv host-packages ## ansible-test sanity from an ansible_collections/vgpu/isolation path
	$(PY) tests/harness/install_get_pip.py
	tests/harness/copy-tree.sh $(SANITY_DIR)
	cd $(SANITY_DIR) && git init -q && git add -A \
	    && $(CURDIR)/$(BIN)/ansible-test sanity --python 3.11 --color no --exclude files/libvgpu/ $(SANITY_ARGS)

.PHONY: unit
unit: venv $(VENV)/.components.stamp $(DEP_COLL_STAMPS) ## pytest: plugin and component unit and integration tests
	$(MAKE) -C files/components proto
	@# Two workers: one core was idle for 13 minutes once the prebuild's Go builds were done. A
	@# file's tests stay on one worker, so its module fixtures (libvgpu builds) run once.
	$(BIN)/pytest -q -n $(UNIT_JOBS) --dist loadfile tests/unit files/components/tests -m "not docker"

.PHONY: security
security: venv $(VENV)/.components.stamp $(DEP_COLL_STAMPS) ## tests/security: a regression test for each finding of the adversarial review
	$(MAKE) -C files/components proto
	$(BIN)/pytest -q tests/security

.PHONY: libvgpu-test
libvgpu-test: ## build libvgpu with -Werror and run its tests, plain and under sanitizers
	$(MAKE) -C files/libvgpu check PYTHON=$(abspath $(PY))

.PHONY: images
images: venv $(VENV)/.components.stamp ## the locally built container images (molecule node image, component image)
	tests/harness/ensure-docker.sh
	tests/harness/build-node-image.sh
	@echo ">> component image (built by files/components/image/build.sh when stale) and its tests"
	$(BIN)/pytest -q -m docker files/components/tests/test_image.py

.PHONY: molecule
molecule: collection images ## every molecule scenario: converge, idempotence, verify
	tests/harness/molecule.sh $(MOLECULE_JOBS) $(MOLECULE_SCENARIOS)

.PHONY: e2e
e2e: collection $(VENV)/.components.stamp ## end-to-end tests against a real local Kubernetes control plane
	$(MAKE) -C tests/k8s test

.PHONY: e2e-node
e2e-node: collection images bundle ## a real kubeadm node provisioned by its own make site, air-gapped (KEEP=1 leaves it up)
	$(MAKE) -C files/libvgpu fake-driver
	@echo ">> make e2e-node: a kubeadm node that provisions itself with make site, tested end to end (about 12 minutes)"
	VGPU_E2E_DAY2=$(E2E_NODE_DAY2) VGPU_E2E_SCHEDULING=$(E2E_NODE_SCHEDULING) VGPU_E2E_UPGRADE_FROM=$(E2E_NODE_UPGRADE_FROM) \
		tests/node/run-e2e.sh

.PHONY: e2e-node-day2
e2e-node-day2: ## make e2e-node plus upgrade.yml and stack.yml on its cluster (not in make test)
	$(MAKE) e2e-node E2E_NODE_DAY2=1

.PHONY: e2e-node-upgrade
e2e-node-upgrade: ## a node provisioned by the release E2E_UPGRADE_FROM, upgraded by this tree's upgrade.yml (not in make test)
	$(MAKE) e2e-node E2E_NODE_UPGRADE_FROM=$(E2E_UPGRADE_FROM)

.PHONY: e2e-node-dra
e2e-node-dra: ## make e2e-node on the DRA path: the bundle's containerd-cdi, claims (not in make test)
	$(MAKE) e2e-node E2E_NODE_SCHEDULING=dra

.PHONY: e2e-node-down
e2e-node-down: ## remove the node KEEP=1 make e2e-node left up
	tests/node/node.sh down

.PHONY: e2e-site
e2e-site: collection images bundle ## three nodes: a control plane and two GPU workers joined by one make site over SSH (not in make test)
	$(MAKE) -C files/libvgpu fake-driver
	@echo ">> make e2e-site: a control plane and two GPU workers, provisioned by make site on the control plane"
	VGPU_E2E_DAY2=$(E2E_SITE_DAY2) tests/site/run-e2e.sh

.PHONY: e2e-site-day2
e2e-site-day2: ## make e2e-site, then a fresh worker joined (site.yml --limit) and another removed (drain, uninstall.yml --limit; not in make test)
	$(MAKE) e2e-site E2E_SITE_DAY2=1

.PHONY: e2e-site-down
e2e-site-down: ## remove the site KEEP=1 make e2e-site left up
	tests/site/run-e2e.sh down

.PHONY: clean
clean: ## remove build outputs (keeps the venv and caches)
	rm -rf build $(COLLECTIONS)
	$(MAKE) -C files/libvgpu clean
