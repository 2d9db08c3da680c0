"""crosszone's lab: what tests and shows the gateway, apart from what runs on a gateway host.

The emulator (emulate), the workload, the benchmarks (bench), the demo, the pcap runner and its
sample traffic, the planner's charts and the local etcd starter. Installed with the `lab` extra
(`pip install crosszone[lab]`; a checkout's `make setup` installs it). The lab imports the product
(`crosszone`); the product never imports the lab (tests/unit/test_layers.py), and `crosszone.cli`
registers the lab's commands only when it is installed.
"""
