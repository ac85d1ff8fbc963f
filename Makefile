# incastlab: every target runs inside the project's venv; the network ones need root.
# Pass options through ARGS, e.g.  make compare ARGS="--steps 5 --workers 4"
PY      := .venv/bin/python
IL      := .venv/bin/incastlab
ARGS    ?=
RUN     ?= results/latest

.PHONY: deps image vm-box vm-check cluster-check job parallel ecmp paths test test-unit test-integration lint fabric compare straggler mitigate incast report dashboard bench soak clean-net clean

deps:            ## install everything (Debian packages, Open vSwitch running, .venv); idempotent
	bash scripts/deps.sh

image:           ## the worker image incastlab/worker:<version> (torch + workload code, offline); cached
	$(PY) -m topologies.image $(ARGS)

vm-box:          ## a Debian 12 box for vagrant-libvirt, built here, that provisions offline; cached
	bash scripts/vm-box.sh

vm-check:        ## boot the box under libvirt (KVM, else QEMU's TCG), run fabric/compare/DCTCP incast in it
	bash scripts/vm-check.sh $(ARGS)

cluster-check:   ## the default fabric over 2 container servers (Cluster Edition, VXLAN): ping, RTT, nothing left
	$(PY) -m incastlab.clustercheck $(ARGS)

# unit tests share the two cores (pytest-xdist); fabrics run one at a time. Exit 5: ARGS chose none here.
UNIT_TESTS = -n 2 -m "not integration and not browser"
FABRIC_TESTS = -m "integration or browser"

test: lint       ## the whole suite: unit, integration (real Mininet/OVS/controller), browser; not vm
	$(PY) -m pytest -ra --durations=10 $(UNIT_TESTS) $(ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -ra --durations=25 $(FABRIC_TESTS) $(ARGS) || [ $$? -eq 5 ]

test-unit:       ## tests that need no network
	$(PY) -m pytest -ra $(UNIT_TESTS) $(ARGS)

test-integration:
	$(PY) -m pytest -ra $(FABRIC_TESTS) $(ARGS)

lint:            ## ruff's linter and formatter, both as checks
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

fabric:          ## bring up the default fabric, check and calibrate it (ARGS="--cli" for Mininet's CLI)
	$(IL) fabric $(ARGS)

compare:         ## the main job: PS vs ring all-reduce on the default fabric, report in results/latest
	$(IL) compare $(ARGS)

straggler:       ## sync / async / SSP / backup workers with one straggler
	$(IL) straggler $(ARGS)

mitigate:        ## incast cures: PS with a 1 ms minimum RTO, serial replies, sharded over 2 and 4 hosts, vs PS and ring
	$(IL) mitigate $(ARGS)

incast:          ## the incast curve: goodput vs number of senders, 200 ms vs 1 ms RTO and other cures
	$(IL) incast $(ARGS)

# make parallel: every way of splitting the training that exists, on the default fabric, one model size
PARALLEL ?= ring,fsdp,tp,pp:stages=4,pp:stages=4:schedule=1f1b,moe,hybrid:dp=2:pp=3
PARALLEL_ARGS ?= --steps 10 --grad-mb 0.5 --batch 256 --name parallel

parallel:        ## ring, fsdp, tp, pp (GPipe, 1F1B), moe, hybrid: traffic matrices and incast, report in results/latest
	$(IL) compare --strategies $(PARALLEL) $(PARALLEL_ARGS) $(ARGS)

# make ecmp: ring and gloo all-reduce, ranks interleaved over 2 leaves under 4 spines, per routing policy
ECMP_ARGS ?= --policies ecmp,firstfit,hedera --seeds 2

ecmp:            ## the hash's uplink collisions of the ring's flows, per routing policy and seed
	$(IL) ecmp $(ECMP_ARGS) $(ARGS)

paths:           ## which spine each probed flow takes: make paths ARGS="h1 h3 --count 16"
	$(IL) paths $(ARGS)

job:             ## your own training job in containers on the fabric: make job ARGS="--image IMG -- CMD..."
	$(IL) job $(ARGS)

report:          ## rebuild the report of a saved run:  make report RUN=results/<run>
	$(IL) report $(RUN) $(ARGS)

dashboard:       ## fabric up with the live dashboard on http://127.0.0.1:8080/ until Ctrl-C
	$(IL) dashboard $(ARGS)

bench:           ## benchmarks (not tests): collective bandwidth, PS/ring ratio, analysis speed
	$(PY) -m bench $(ARGS)

soak:            ## short compare runs back to back, reporting leaks
	$(PY) -m bench.soak $(ARGS)

clean-net:       ## remove bridges, veths, processes a crashed run left behind
	$(IL) clean

clean: clean-net
	rm -rf .pytest_cache .ruff_cache tests/artifacts
